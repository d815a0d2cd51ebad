"""hutch: self-hosted gVisor sandboxes for AI agents. `from hutch import Sandbox, AsyncSandbox`."""

from hutch.sdk import *  # noqa: F403  (the SDK's names are hutch's)
from hutch.sdk import __all__ as _sdk_names

__version__ = "0.1.0"
__all__ = list(_sdk_names)
