"""Every HTTP route the SDK calls, named once: its method and its path as the server's OpenAPI
document spells it. The calls (`hutch.sdk.ops`) build their requests only from these, so
tests/unit/test_sdk_openapi.py can check each against the document.

A control-plane route's path hangs off the server's base URL. A plane route's hangs off a plane's
own URL: a sandbox's data plane (the `data_plane_url` the server hands out, SANDBOX_PLANE) or a
volume's (VOLUME_PLANE, whose files calls are a sandbox's files calls).
"""

from __future__ import annotations

from typing import NamedTuple
from urllib.parse import quote

SANDBOX_PLANE = "/data/v1/sandboxes/{sandbox_id}"  # what the server's data_plane_url ends with
VOLUME_PLANE = "/v1/volumes/{ref}"


class Route(NamedTuple):
    method: str  # GET, POST, ...; WS: a WebSocket (which the OpenAPI document does not list)
    path: str  # a template: "{name}" stands for a path parameter
    planes: tuple[str, ...] = ()  # the planes it is under; none: the control plane

    def at(self, base: str, **params: str | int) -> tuple[str, str]:
        """The method and URL under `base` (the server's, or a plane's URL)."""
        return self.method, base + fill(self.path, **params)


def fill(path: str, **params: str | int) -> str:
    """A path template with its parameters, each escaped whole: a name holding "/" stays one segment."""
    return path.format(**{k: quote(str(v), safe="") for k, v in params.items()})


def _data(method: str, path: str) -> Route:
    return Route(method, path, (SANDBOX_PLANE,))


def _files(method: str, path: str) -> Route:
    return Route(method, path, (SANDBOX_PLANE, VOLUME_PLANE))


# --- sandboxes ------------------------------------------------------------------------------------
CREATE_SANDBOX = Route("POST", "/v1/sandboxes")
LIST_SANDBOXES = Route("GET", "/v1/sandboxes")
GET_SANDBOX = Route("GET", "/v1/sandboxes/{sandbox_id}")
UPDATE_SANDBOX = Route("PATCH", "/v1/sandboxes/{sandbox_id}")
KILL_SANDBOX = Route("DELETE", "/v1/sandboxes/{sandbox_id}")
CONNECT_SANDBOX = Route("POST", "/v1/sandboxes/{sandbox_id}/connect")
PAUSE_SANDBOX = Route("POST", "/v1/sandboxes/{sandbox_id}/pause")
RESUME_SANDBOX = Route("POST", "/v1/sandboxes/{sandbox_id}/resume")
NETWORK_LOG = Route("GET", "/v1/sandboxes/{sandbox_id}/network-log")
AUDIT_LOG = Route("GET", "/v1/sandboxes/{sandbox_id}/audit")
LIST_BINDINGS = Route("GET", "/v1/sandboxes/{sandbox_id}/secrets")
ATTACH_SECRET = Route("PUT", "/v1/sandboxes/{sandbox_id}/secrets/{env}")
DETACH_SECRET = Route("DELETE", "/v1/sandboxes/{sandbox_id}/secrets/{env}")

# --- preview ports --------------------------------------------------------------------------------
PUBLISH_PORT = Route("POST", "/v1/sandboxes/{sandbox_id}/preview-ports")
LIST_PORTS = Route("GET", "/v1/sandboxes/{sandbox_id}/preview-ports")
UNPUBLISH_PORT = Route("DELETE", "/v1/sandboxes/{sandbox_id}/preview-ports/{port}")
SIGN_PORT_URL = Route("POST", "/v1/sandboxes/{sandbox_id}/preview-ports/{port}/signed-url")
PORT_TOKEN = Route("GET", "/v1/sandboxes/{sandbox_id}/preview-ports/{port}/token")
ROTATE_PORT_TOKEN = Route("POST", "/v1/sandboxes/{sandbox_id}/preview-ports/{port}/rotate")

# --- snapshots ------------------------------------------------------------------------------------
TAKE_SNAPSHOT = Route("POST", "/v1/sandboxes/{sandbox_id}/snapshots")
FORK_SANDBOX = Route("POST", "/v1/sandboxes/{sandbox_id}/fork")
LIST_SNAPSHOTS = Route("GET", "/v1/snapshots")
GET_SNAPSHOT = Route("GET", "/v1/snapshots/{ref}")
DELETE_SNAPSHOT = Route("DELETE", "/v1/snapshots/{ref}")
BOOT_SNAPSHOT = Route("POST", "/v1/snapshots/{ref}/sandboxes")

# --- volumes --------------------------------------------------------------------------------------
CREATE_VOLUME = Route("POST", "/v1/volumes")
LIST_VOLUMES = Route("GET", "/v1/volumes")
GET_VOLUME = Route("GET", "/v1/volumes/{ref}")
UPDATE_VOLUME = Route("PATCH", "/v1/volumes/{ref}")
DELETE_VOLUME = Route("DELETE", "/v1/volumes/{ref}")

# --- secrets and providers ------------------------------------------------------------------------
CREATE_SECRET = Route("POST", "/v1/secrets")
LIST_SECRETS = Route("GET", "/v1/secrets")
GET_SECRET = Route("GET", "/v1/secrets/{name}")
DELETE_SECRET = Route("DELETE", "/v1/secrets/{name}")
ROTATE_SECRET = Route("POST", "/v1/secrets/{name}/rotate")
SECRET_AUDIT = Route("GET", "/v1/secrets/{name}/audit")
LIST_PROVIDERS = Route("GET", "/v1/providers")

# --- templates and builds -------------------------------------------------------------------------
CREATE_TEMPLATE = Route("POST", "/v1/templates")
LIST_TEMPLATES = Route("GET", "/v1/templates")
GET_TEMPLATE = Route("GET", "/v1/templates/{ref}")
DELETE_TEMPLATE = Route("DELETE", "/v1/templates/{ref}")
START_BUILD = Route("POST", "/v1/templates/{ref}/builds")
LIST_BUILDS = Route("GET", "/v1/templates/{ref}/builds")
GET_BUILD = Route("GET", "/v1/templates/{ref}/builds/{build_id}")
CANCEL_BUILD = Route("POST", "/v1/templates/{ref}/builds/{build_id}/cancel")
BUILD_LOGS = Route("GET", "/v1/templates/{ref}/builds/{build_id}/logs")

# --- events and webhooks --------------------------------------------------------------------------
LIST_EVENTS = Route("GET", "/v1/events")
STREAM_EVENTS = Route("GET", "/v1/events/stream")
CREATE_WEBHOOK = Route("POST", "/v1/webhooks")
LIST_WEBHOOKS = Route("GET", "/v1/webhooks")
GET_WEBHOOK = Route("GET", "/v1/webhooks/{webhook_id}")
UPDATE_WEBHOOK = Route("PATCH", "/v1/webhooks/{webhook_id}")
DELETE_WEBHOOK = Route("DELETE", "/v1/webhooks/{webhook_id}")
WEBHOOK_DELIVERIES = Route("GET", "/v1/webhooks/{webhook_id}/deliveries")

# --- a sandbox's data plane: commands and the code interpreter ------------------------------------
RUN_COMMAND = _data("POST", "/commands/run")
SPAWN_COMMAND = _data("POST", "/commands/spawn")
LIST_PROCESSES = _data("GET", "/commands")
SIGNAL_PROCESS = _data("POST", "/commands/{pid}/signal")
ATTACH_PROCESS = _data("WS", "/commands/{pid}/ws")
RUN_CODE = _data("POST", "/code/execute")
DESKTOP_START = _data("POST", "/desktop/start")
DESKTOP_SCREENSHOT = _data("GET", "/desktop/screenshot")
DESKTOP_ACTION = _data("POST", "/desktop/actions")
DESKTOP_CURSOR = _data("GET", "/desktop/cursor")
DESKTOP_SCREEN = _data("GET", "/desktop/screen")
DESKTOP_STREAM = _data("POST", "/desktop/stream")
CREATE_CONTEXT = _data("POST", "/code/contexts")
LIST_CONTEXTS = _data("GET", "/code/contexts")
RESTART_CONTEXT = _data("POST", "/code/contexts/{context_id}/restart")
REMOVE_CONTEXT = _data("DELETE", "/code/contexts/{context_id}")
DOWNLOAD_DIR = _data("GET", "/files/zip")  # a sandbox's only
WATCH_DIR = _data("GET", "/files/watch")

# --- files: a sandbox's, or a volume's ------------------------------------------------------------
WRITE_FILE = _files("PUT", "/files")
READ_FILE = _files("GET", "/files")
REMOVE_FILE = _files("DELETE", "/files")
STAT_FILE = _files("GET", "/files/stat")
LIST_DIR = _files("GET", "/files/list")
MAKE_DIR = _files("POST", "/files/mkdir")
MOVE_FILE = _files("POST", "/files/move")

ROUTES = {name: value for name, value in globals().items() if isinstance(value, Route)}  # the test's list
