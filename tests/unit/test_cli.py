"""The `hutch` command's parser, with no server: every command takes its documented flags, and --help works."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from hutch.cli import (
    commands,
    events,
    files,
    fleet,
    mcp,
    previews,
    sandboxes,
    secrets,
    server,
    snapshots,
    templates,
    volumes,
    webhooks,
)
from hutch.cli.program import build_parser, parse


def _commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every command and group under `parser`, by the words that name it (("template", "create"), say)."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found[(*prefix, name)] = child
                found.update(_commands(child, (*prefix, name)))
    return found


ALL = _commands(build_parser())
LEAVES = {words: p for words, p in ALL.items() if not any(isinstance(a, argparse._SubParsersAction) for a in p._actions)}

# Each command with every flag it documents, and what the handler then reads
EVERY_FLAG: dict[tuple[str, ...], tuple[list[str], dict[str, Any]]] = {
    ("serve",): (
        ["serve", "--host", "0.0.0.0", "--port", "9000", "--public-url", "https://h.test",
         "--cache-dir", "/c", "--warm-pool", "0", "--warm-pool-max", "40", "--freeze-idle-after", "30", "--max-sandboxes", "8",
         "--team-max-sandboxes", "4", "--team-max-paused", "3", "--team-max-paused-bytes", "2G",
         "--team-max-snapshots", "9", "--team-max-snapshot-bytes", "3G", "--team-max-volumes", "4",
         "--team-max-volume-size", "5G",
         "--checkpoint-budget-bytes", "1.5T", "--over-budget-grace", "60", "--audit-retention-days", "7",
         "--egress-hosts", "/h", "--egress-no-system-dns", "--trust-ca", "/a.pem",
         "--trust-ca", "/b.pem", "--preview-port", "8000", "--preview-domain", "example.test", "--preview-https",
         "--e2b-domain", "sbx.example.test", "--e2b-port", "8443", "--e2b-public-port", "443",
         "--e2b-cert", "/w.pem", "--e2b-key", "/w.key",
         "--max-builds", "3", "--image-dir", "/i", "--registry-pulls", "--store", "postgresql://h/db", "--ray", "h:6379",
         "--shared", "/s", "--ray-node-ip", "10.0.0.2", "--placement-wait", "5", "--allow-unlimited-boxes",
         "--webhook-allow", "127.0.0.1,hooks.lan", "--webhook-allow", "10.0.0.0/8", "--webhook-retry-for", "30",
         "--team-max-webhooks", "3", "--otlp-endpoint", "http://otel:4318"],
        {"fn": server.cmd_serve, "host": "0.0.0.0", "port": 9000, "public_url": "https://h.test",
         "cache_dir": Path("/c"), "warm_pool": 0, "warm_pool_max": 40, "freeze_idle_after": 30.0,
         "max_sandboxes": 8, "team_max_sandboxes": 4, "team_max_paused": 3, "team_max_paused_bytes": 2 * 2**30,
         "team_max_snapshots": 9, "team_max_snapshot_bytes": 3 * 2**30,
         "checkpoint_budget_bytes": int(1.5 * 2**40), "over_budget_grace": 60.0, "audit_retention_days": 7.0,
         "egress_hosts": Path("/h"), "egress_no_system_dns": True,
         "trust_ca": [Path("/a.pem"), Path("/b.pem")], "preview_port": 8000, "preview_domain": "example.test",
         "e2b_domain": "sbx.example.test", "e2b_port": 8443, "e2b_public_port": 443, "e2b_cert": Path("/w.pem"),
         "e2b_key": Path("/w.key"),
         "preview_https": True, "max_builds": 3, "image_dir": [Path("/i")], "registry_pulls": True,
         "store": "postgresql://h/db", "ray": "h:6379", "shared": Path("/s"), "ray_node_ip": "10.0.0.2",
         "placement_wait": 5.0, "allow_unlimited_boxes": True,
         "webhook_allow": ["127.0.0.1,hooks.lan", "10.0.0.0/8"], "webhook_retry_for": 30.0, "team_max_webhooks": 3,
         "otlp_endpoint": "http://otel:4318"}),
    ("build-base",): (["build-base", "--cache-dir", "/c", "--desktop"], {"fn": server.cmd_build_base, "cache_dir": Path("/c"),
                                                        "desktop": True}),
    ("team-create",): (["team-create", "acme", "--e2b", "--store", "postgresql://h/db"],
                       {"fn": server.cmd_team_create, "name": "acme", "e2b": True, "store": "postgresql://h/db"}),
    ("create",): (
        ["create", "--name", "n", "--template", "t", "--timeout", "60", "--metadata", "a=1", "-m", "b=2", "--env", "X=1",
         "-e", "Y=2", "--allow-out", "10.0.0.0/8", "--deny-out", "0.0.0.0/0", "--secret", "K=s", "-s", "L=t",
         "--volume", "/mnt/data=repo", "-v", "/srv=cache:ro"],
        {"fn": sandboxes.cmd_create, "name": "n", "template": "t", "timeout": 60, "metadata": ["a=1", "b=2"],
         "env": ["X=1", "Y=2"], "allow_out": ["10.0.0.0/8"], "deny_out": ["0.0.0.0/0"], "secret": ["K=s", "L=t"],
         "volume": ["/mnt/data=repo", "/srv=cache:ro"]}),
    ("template", "create"): (
        ["template", "create", "web", "--from", "docker://x", "--run", "a", "--env", "K=V", "--workdir", "/w", "--user",
         "root", "--run", "b", "--start-cmd", "s", "--ready-cmd", "r", "--ready-timeout", "30", "--vcpu", "2",
         "--memory", "512", "--disk", "2048", "--no-wait"],
        {"fn": templates.cmd_template_create, "name": "web", "from_": "docker://x",
         "steps": [("run", "a"), ("env", "K=V"), ("workdir", "/w"), ("user", "root"), ("run", "b")],
         "start_cmd": "s", "ready_cmd": "r", "ready_timeout": 30, "vcpu": 2, "memory": 512, "disk": 2048,
         "no_wait": True}),
    ("template", "ls"): (["template", "ls"], {"fn": templates.cmd_template_ls}),
    ("template", "rm"): (["template", "rm", "a", "b"], {"fn": templates.cmd_template_rm, "names": ["a", "b"]}),
    ("template", "logs"): (["template", "logs", "web", "--build", "b1", "--no-follow"],
                           {"fn": templates.cmd_template_logs, "name": "web", "build": "b1", "no_follow": True}),
    ("template", "builds"): (["template", "builds", "web"], {"fn": templates.cmd_template_builds, "name": "web"}),
    ("template", "rebuild"): (["template", "rebuild", "web", "--no-cache", "--no-wait"],
                              {"fn": templates.cmd_template_rebuild, "name": "web", "no_cache": True, "no_wait": True}),
    ("template", "cancel"): (["template", "cancel", "web", "--build", "b1"],
                             {"fn": templates.cmd_template_cancel, "name": "web", "build": "b1"}),
    ("secret",): (
        ["secret", "create", "key", "--provider", "openai", "--allowed-host", "a.test", "--allowed-host", "b.test",
         "--header", "x-api-key", "--format", "Bearer {value}", "--from-env", "KEY", "--sandbox", "sb", "--limit", "5"],
        {"fn": secrets.cmd_secret, "action": "create", "name": "key", "provider": "openai",
         "allowed_host": ["a.test", "b.test"], "header": "x-api-key", "format": "Bearer {value}", "from_env": "KEY",
         "sandbox": "sb", "limit": 5}),
    ("preview",): (["preview", "sb", "3000", "--publish", "--private", "--expires", "60"],
                   {"fn": previews.cmd_preview, "id": "sb", "port": 3000, "publish": True, "private": True,
                    "expires": 60}),
    ("mcp",): (["mcp", "serve", "--listen", "127.0.0.1:9", "--ephemeral"],
               {"fn": mcp.cmd_mcp, "action": "serve", "listen": "127.0.0.1:9", "ephemeral": True}),
    ("snapshot",): (["snapshot", "boot", "snap", "--name", "n", "-m", "a=1", "--metadata", "b=2", "--sandbox", "sb",
                     "--count", "3"],
                    {"fn": snapshots.cmd_snapshot, "action": "boot", "target": "snap", "name": "n",
                     "metadata": ["a=1", "b=2"], "sandbox": "sb", "count": 3}),
    ("volume", "create"): (["volume", "create", "repo", "--size", "2G", "--metadata", "a=1", "-m", "b=2"],
                           {"fn": volumes.cmd_volume_create, "name": "repo", "size": 2048,
                            "metadata": ["a=1", "b=2"]}),
    ("volume", "ls"): (["volume", "ls", "--metadata", "a=1", "-m", "b=2"],
                       {"fn": volumes.cmd_volume_ls, "metadata": ["a=1", "b=2"]}),
    ("volume", "info"): (["volume", "info", "repo"], {"fn": volumes.cmd_volume_info, "volume": "repo"}),
    ("webhook", "create"): (["webhook", "create", "https://h.test/x", "--type", "sandbox.killed", "--type",
                             "sandbox.paused", "--name", "n", "--secret", "s" * 16, "--disabled"],
                            {"fn": webhooks.cmd_webhook_create, "url": "https://h.test/x",
                             "type": ["sandbox.killed", "sandbox.paused"], "name": "n", "secret": "s" * 16,
                             "disabled": True}),
    ("webhook", "ls"): (["webhook", "ls"], {"fn": webhooks.cmd_webhook_ls}),
    ("webhook", "info"): (["webhook", "info", "w1"], {"fn": webhooks.cmd_webhook_info, "webhook": "w1"}),
    ("webhook", "update"): (["webhook", "update", "w1", "--url", "https://h.test/y", "--type", "sandbox.killed",
                             "--name", "m", "--secret", "t" * 16, "--enabled", "true"],
                            {"fn": webhooks.cmd_webhook_update, "webhook": "w1", "url": "https://h.test/y",
                             "type": ["sandbox.killed"], "name": "m", "secret": "t" * 16, "enabled": "true"}),
    ("webhook", "rm"): (["webhook", "rm", "a", "b"], {"fn": webhooks.cmd_webhook_rm, "webhooks": ["a", "b"]}),
    ("webhook", "deliveries"): (["webhook", "deliveries", "w1", "--limit", "5"],
                                {"fn": webhooks.cmd_webhook_deliveries, "webhook": "w1", "limit": 5}),
    ("volume", "rm"): (["volume", "rm", "a", "b"], {"fn": volumes.cmd_volume_rm, "volumes": ["a", "b"]}),
    ("volume", "cp"): (["volume", "cp", "-", "repo:/x"], {"fn": volumes.cmd_volume_cp, "src": "-", "dst": "repo:/x"}),
    ("providers",): (["providers"], {"fn": secrets.cmd_providers}),
    ("ls",): (["ls", "--status", "paused", "--metadata", "a=1", "-m", "b=2"],
              {"fn": sandboxes.cmd_ls, "status": "paused", "metadata": ["a=1", "b=2"]}),
    ("info",): (["info", "sb"], {"fn": sandboxes.cmd_info, "id": "sb"}),
    ("exec",): (["exec", "sb", "--cwd", "/w", "--env", "A=1", "-e", "B=2", "--timeout", "1.5", "--user", "root", "--",
                 "ls"],
                {"fn": commands.cmd_exec, "id": "sb", "cwd": "/w", "env": ["A=1", "B=2"], "timeout": 1.5,
                 "user": "root", "command": ["ls"]}),
    ("shell",): (["shell", "sb", "--user", "user", "--", "bash"],
                 {"fn": commands.cmd_shell, "id": "sb", "user": "user", "command": ["bash"]}),
    ("netlog",): (["netlog", "sb", "--limit", "5"], {"fn": sandboxes.cmd_netlog, "id": "sb", "limit": 5}),
    ("audit",): (["audit", "sb", "--limit", "5"], {"fn": sandboxes.cmd_audit, "id": "sb", "limit": 5}),
    ("events",): (["events", "--after", "7", "--type", "sandbox.paused", "--type", "sandbox.killed", "--sandbox", "sb",
                   "--limit", "5", "--follow"],
                  {"fn": events.cmd_events, "after": 7, "type": ["sandbox.paused", "sandbox.killed"], "sandbox": "sb",
                   "limit": 5, "follow": True}),
    ("ps",): (["ps", "sb"], {"fn": commands.cmd_ps, "id": "sb"}),
    ("cp",): (["cp", "-", "sb:/tmp/x"], {"fn": files.cmd_cp, "src": "-", "dst": "sb:/tmp/x"}),
    ("kill",): (["kill", "a", "b"], {"fn": sandboxes.cmd_kill, "ids": ["a", "b"]}),
    ("node",): (
        ["node", "--ray", "h:6379", "--store", "postgresql://h/db", "--shared", "/s", "--listen", "10.0.0.2:7430",
         "--name", "n1", "--vcpu", "8", "--memory-mib", "4096", "--cache-dir", "/c", "--warm-pool", "1", "--warm-pool-max", "6",
         "--egress-hosts", "/h", "--egress-no-system-dns", "--trust-ca", "/a.pem", "--max-builds", "3",
         "--image-dir", "/i", "--registry-pulls", "--ray-started", "--allow-unlimited-boxes",
         "--otlp-endpoint", "http://otel:4318"],
        {"fn": fleet.cmd_node, "ray": "h:6379", "store": "postgresql://h/db", "shared": Path("/s"),
         "listen": "10.0.0.2:7430", "name": "n1", "vcpu": 8, "memory_mib": 4096, "cache_dir": Path("/c"),
         "warm_pool": 1, "warm_pool_max": 6, "egress_hosts": Path("/h"), "egress_no_system_dns": True,
         "trust_ca": [Path("/a.pem")],
         "max_builds": 3, "image_dir": [Path("/i")], "registry_pulls": True, "ray_started": True,
         "allow_unlimited_boxes": True, "otlp_endpoint": "http://otel:4318"}),
    ("nodes",): (["nodes"], {"fn": fleet.cmd_nodes}),
}

# Each command with nothing optional given: the defaults its handler sees
DEFAULTS: dict[tuple[str, ...], tuple[list[str], dict[str, Any]]] = {
    ("serve",): (["serve"], {"host": "127.0.0.1", "port": 7423, "warm_pool": None, "max_sandboxes": 256,
                             "team_max_sandboxes": 64, "egress_hosts": None, "egress_no_system_dns": False,
                             "trust_ca": None, "preview_port": 7424, "preview_domain": "localhost",
                             "preview_https": False, "max_builds": 2, "image_dir": None, "registry_pulls": False,
                             "allow_unlimited_boxes": False, "webhook_allow": None, "webhook_retry_for": 900.0,
                             "team_max_webhooks": 20, "otlp_endpoint": None}),
    ("create",): (["create"], {"name": "cli", "template": None, "timeout": None, "metadata": None, "env": None,
                               "allow_out": None, "deny_out": None, "secret": None, "volume": None}),
    ("template", "create"): (["template", "create", "web"], {"from_": "hutch/base", "steps": None, "no_wait": False}),
    ("template", "logs"): (["template", "logs", "web"], {"build": None, "no_follow": False}),
    ("secret",): (["secret", "ls"], {"name": None, "format": "{value}", "limit": 50, "allowed_host": None}),
    ("preview",): (["preview", "sb"], {"port": None, "publish": False, "private": False, "expires": 3600}),
    ("mcp",): (["mcp", "serve"], {"listen": None, "ephemeral": False}),
    ("exec",): (["exec", "sb"], {"command": [], "cwd": None, "env": None, "timeout": None, "user": None}),
    ("netlog",): (["netlog", "sb"], {"limit": 50}),
    ("audit",): (["audit", "sb"], {"limit": 50}),
    ("events",): (["events"], {"after": 0, "type": [], "sandbox": None, "limit": 100, "follow": False}),
    ("snapshot",): (["snapshot", "ls"], {"target": None, "name": None, "metadata": None, "sandbox": None, "count": 1}),
    ("volume", "create"): (["volume", "create", "repo"], {"size": None, "metadata": None}),
    ("volume", "ls"): (["volume", "ls"], {"metadata": None}),
    ("webhook", "create"): (["webhook", "create", "https://h.test/x"], {"type": [], "name": "", "secret": None,
                                                                         "disabled": False}),
    ("webhook", "update"): (["webhook", "update", "w1"], {"url": None, "type": None, "name": None, "secret": None,
                                                          "enabled": None}),
    ("webhook", "deliveries"): (["webhook", "deliveries", "w1"], {"limit": 50}),
}


def _check(args: argparse.Namespace, expected: dict[str, Any]) -> None:
    assert {k: getattr(args, k) for k in expected} == expected


def test_every_command_has_an_example() -> None:
    assert set(EVERY_FLAG) == set(LEAVES)


@pytest.mark.parametrize("words", sorted(LEAVES), ids=" ".join)
def test_each_command_parses_every_flag_it_documents(words: tuple[str, ...]) -> None:
    argv, expected = EVERY_FLAG[words]
    given = set(argv)
    undocumented = [a.option_strings for a in LEAVES[words]._actions
                    if a.option_strings and a.dest != "help" and not given & set(a.option_strings)]
    assert not undocumented, f"the example for {' '.join(words)} leaves out {undocumented}"
    _check(parse(argv), {"json": False, **expected})


@pytest.mark.parametrize("words", sorted(DEFAULTS), ids=" ".join)
def test_defaults(words: tuple[str, ...]) -> None:
    argv, expected = DEFAULTS[words]
    _check(parse(argv), expected)


def test_global_flags_come_before_the_command() -> None:
    _check(parse(["--json", "--data-dir", "/d", "ls"]), {"json": True, "data_dir": Path("/d"), "cmd": "ls"})


def test_everything_after_a_double_dash_is_the_command() -> None:
    args = parse(["exec", "sb", "--cwd", "/w", "--", "ls", "--cwd", "-l", "--", "x"])
    _check(args, {"cwd": "/w", "command": ["ls", "--cwd", "-l", "--", "x"]})
    _check(parse(["shell", "sb", "--", "top", "-b"]), {"command": ["top", "-b"]})
    _check(parse(["exec", "sb", "--"]), {"command": []})


@pytest.mark.parametrize("argv", [["bogus"], ["template"], ["secret", "nope"], ["exec", "sb", "--user", "admin"],
                                  ["preview", "sb", "eighty"], ["volume"], ["volume", "create", "v", "--size", "1.5K"],
                                  ["volume", "create", "v", "--size", "lots"], ["volume", "cp", "a"], []], ids=repr)
def test_bad_usage_exits_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as e:
        parse(argv)
    assert e.value.code == 2


@pytest.mark.parametrize(("given", "mib"), [("1", 1), ("2048", 2048), ("512M", 512), ("2G", 2048), ("1.5g", 1536),
                                            ("1GiB", 1024), ("1T", 2**20), ("1024K", 1)])
def test_a_volume_size_is_mib_or_a_size_with_a_unit(given: str, mib: int) -> None:
    assert volumes.mib_size(given) == mib
    _check(parse(["volume", "create", "v", "--size", given]), {"size": mib})


@pytest.mark.parametrize("words", [(), *sorted(ALL)], ids=lambda w: " ".join(w) or "hutch")
def test_help_exits_0(words: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        parse([*words, "--help"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith(" ".join(("usage: hutch", *words)))
