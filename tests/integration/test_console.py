"""The web console in a real browser: Debian's Chromium, headless, driven by Selenium through
Debian's chromium-driver, against a real server with real boxes on loopback. What a person checks:
signing in, the list following the SDK, pausing from the page, a shell in the terminal, a desktop
box's live screen, a file downloaded, a denied connection in the network log, a volume made, mounted, refused deletion while
mounted and deleted; and what must not happen: another team's box seen, a change made from another
origin or without the session's token, what a team wrote shown as markup.

The tests save screenshots of the main pages to docs/console/ (the README shows them)."""

from __future__ import annotations

import contextlib
import http.server
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hutch import NotFoundError, RunStep, Sandbox, Secret, Template, Volume, Webhooks
from tests.integration.support import Env, free_port, needs_installed, wait_for
from tests.integration.test_desktop_e2b import needs_desktop

try:
    from selenium import webdriver
    from selenium.common.exceptions import NoAlertPresentException, WebDriverException
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.remote.webelement import WebElement

    HAVE_SELENIUM = True
except ImportError:  # needs_installed's rule: under CI a missing piece fails, elsewhere the tests skip
    HAVE_SELENIUM = False

SHOTS = Path(__file__).resolve().parents[2] / "docs" / "console"
CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def downloads() -> Iterator[Path]:
    where = Path(tempfile.mkdtemp(prefix="hutch-downloads-"))
    yield where
    shutil.rmtree(where, ignore_errors=True)


def _browser(downloads: Path) -> WebDriver:
    needs_installed("selenium", HAVE_SELENIUM)
    needs_installed("Debian's chromium and chromium-driver", Path(CHROMIUM).exists() and Path(DRIVER).exists())
    profile = tempfile.mkdtemp(prefix="hutch-chromium-")
    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--window-size=1360,1000", f"--user-data-dir={profile}"):
        opts.add_argument(arg)
    opts.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                           "download.prompt_for_download": False})
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)  # no Selenium Manager: the driver is given
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    driver.implicitly_wait(0)
    return driver


@pytest.fixture(scope="module")
def browser(env: Env, downloads: Path) -> Iterator[WebDriver]:
    """A browser signed in as team "default"."""
    driver = _browser(downloads)
    try:
        sign_in(driver, env.url, env.key_a)
        yield driver
    finally:
        driver.quit()


def sign_in(driver: WebDriver, url: str, key: str) -> None:
    driver.get(f"{url}/console")
    wait_until(lambda: driver.find_elements(By.ID, "api_key"), "the sign-in form")
    driver.find_element(By.ID, "api_key").send_keys(key)
    driver.find_element(By.ID, "sign-in").click()
    wait_until(lambda: driver.current_url.endswith("/console/boxes"), "the boxes page")


def wait_until(check: Callable[[], Any], what: str, timeout: float = 30.0) -> None:
    wait_for(lambda: bool(check()), timeout, what)


def shot(driver: WebDriver, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / f"{name}.png"))


def rows(driver: WebDriver) -> dict[str, str]:
    """The box list as shown: id -> status."""
    found: dict[str, str] = {}
    for row in driver.find_elements(By.CSS_SELECTOR, "#box-rows tr.box"):
        try:
            found[str(row.get_attribute("data-id"))] = str(row.get_attribute("data-status"))
        except WebDriverException:  # swapped out by a refresh while read
            pass
    return found


def accept_confirm(driver: WebDriver) -> bool:
    try:
        driver.switch_to.alert.accept()
        return True
    except NoAlertPresentException:
        return False


def status_on_page(driver: WebDriver) -> str:
    found = driver.find_elements(By.ID, "box-status")
    try:
        return found[0].text if found else ""
    except WebDriverException:
        return ""


def click(driver: WebDriver, css: str) -> bool:
    """Click what `css` finds, unless a refresh swapped it out meanwhile (then try again)."""
    try:
        driver.find_element(By.CSS_SELECTOR, css).click()
        return True
    except WebDriverException:
        return False


def text_at(driver: WebDriver, css: str) -> str:
    """The text of what `css` finds, read at once (a part may be swapped while Selenium reads)."""
    return str(driver.execute_script("const e = document.querySelector(arguments[0]); return e ? e.innerText : ''", css))


def console_cookie(driver: WebDriver) -> dict[str, Any]:
    cookie = driver.get_cookie("hutch_console")
    assert cookie is not None, "no session cookie"
    return dict(cookie)


@pytest.fixture
def sandbox(env: Env) -> Iterator[Sandbox]:
    sb = Sandbox.create(name="console-box", metadata={"purpose": "console"}, api_key=env.key_a, base_url=env.url)
    try:
        yield sb
    finally:
        Sandbox.kill_by_id(sb.id, api_key=env.key_a, base_url=env.url)


def test_sign_in_gives_a_session_cookie_and_never_keeps_the_key(env: Env, downloads: Path) -> None:
    driver = _browser(downloads)
    try:
        driver.get(f"{env.url}/console/boxes")
        wait_until(lambda: driver.current_url.endswith("/console/sign-in"), "signed out: sent to sign in")
        shot(driver, "sign-in")
        driver.find_element(By.ID, "api_key").send_keys("hutch_not-a-key")
        driver.find_element(By.ID, "sign-in").click()
        wait_until(lambda: driver.find_elements(By.ID, "sign-in-error"), "a wrong key refused")
        assert driver.get_cookie("hutch_console") is None
        driver.find_element(By.ID, "api_key").send_keys(env.key_a)
        driver.find_element(By.ID, "sign-in").click()
        wait_until(lambda: driver.current_url.endswith("/console/boxes"), "signed in")
        cookie = console_cookie(driver)
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/console"
        assert cookie["expiry"] > time.time() + 3600, "it expires, and not at once"
        assert cookie["value"] != env.key_a
        kept = driver.execute_script("return [document.cookie, JSON.stringify(localStorage), "
                                     "JSON.stringify(sessionStorage), document.documentElement.outerHTML]")
        assert "hutch_console" not in kept[0], "no script reads the session"
        assert not any(env.key_a in k for k in kept), "the API key is nowhere in the browser"

        driver.find_element(By.ID, "sign-out").click()
        wait_until(lambda: driver.current_url.endswith("/console/sign-in"), "signed out")
        stale = httpx.get(f"{env.url}/console/boxes", cookies={"hutch_console": cookie["value"]})
        assert stale.status_code == 303 and stale.headers["location"] == "/console/sign-in", "revoked at sign-out"
    finally:
        driver.quit()


def test_the_box_list_follows_the_sdk(browser: WebDriver, env: Env, sandbox: Sandbox) -> None:
    browser.get(f"{env.url}/console/boxes")
    wait_until(lambda: rows(browser).get(sandbox.id) == "active", "the new box in the list, without a reload")
    later = Sandbox.create(name="console-later", metadata={"purpose": "other"}, api_key=env.key_a, base_url=env.url)
    try:
        wait_until(lambda: later.id in rows(browser), "a box made after the page opened")
        shot(browser, "boxes")
        browser.find_element(By.CSS_SELECTOR, "#filters input[name=metadata]").send_keys("purpose=console")
        wait_until(lambda: sandbox.id in rows(browser) and later.id not in rows(browser), "the metadata filter")
        later.kill()
        browser.find_element(By.CSS_SELECTOR, "#filters input[name=metadata]").clear()
        wait_until(lambda: sandbox.id in rows(browser) and later.id not in rows(browser), "a killed box leaves the list")
    finally:
        Sandbox.kill_by_id(later.id, api_key=env.key_a, base_url=env.url)


def test_pausing_a_box_from_its_page(browser: WebDriver, env: Env, sandbox: Sandbox) -> None:
    browser.get(f"{env.url}/console/boxes/{sandbox.id}")
    wait_until(lambda: status_on_page(browser) == "active", "the box's status")
    wait_until(lambda: click(browser, "#info button[data-action=pause]"), "the pause button")
    wait_until(lambda: accept_confirm(browser), "the page asks first")
    wait_until(lambda: status_on_page(browser) == "paused", "paused, on the page", timeout=120)
    assert sandbox.get_info().status == "paused"
    assert browser.find_elements(By.CSS_SELECTOR, "#info button[data-action=resume]")


def test_a_command_typed_in_the_terminal(browser: WebDriver, env: Env, sandbox: Sandbox) -> None:
    browser.get(f"{env.url}/console/boxes/{sandbox.id}")
    browser.find_element(By.ID, "open-terminal").click()
    terminal = browser.find_element(By.ID, "terminal")
    wait_until(lambda: terminal.get_attribute("data-attached") == "yes", "the terminal attached")
    wait_until(lambda: "$" in screen(browser), "the shell's prompt")
    keys = browser.find_element(By.CSS_SELECTOR, "#terminal .xterm-helper-textarea")
    keys.send_keys("echo hutch-$((6*7)) > /tmp/t\n")
    wait_until(lambda: screen(browser).count(":~$") >= 2, "the next prompt")
    keys.send_keys("cat /tmp/t; uname -s\n")
    wait_until(lambda: "hutch-42" in screen(browser) and "Linux" in screen(browser), "the command's output")
    keys.send_keys("curl -s -o /dev/null -w '%{http_code}\\n' http://169.254.169.254/\n")  # what an agent tries
    wait_until(lambda: "403" in screen(browser), "the proxy's refusal")
    assert sandbox.files.read("/tmp/t") == b"hutch-42\n", "it ran in the box"
    wait_until(lambda: audited(browser, "spawn"), "the shell in the audit log")
    wait_until(lambda: "bash -l" in text_of(browser, "processes"), "the shell among the processes")
    plotted = 'const p = document.querySelector("#usage figure.plot"); return p ? Number(p.dataset.samples) : 0'
    wait_until(lambda: browser.execute_script(plotted) >= 3, "three samples plotted", timeout=60)  # read at once: parts refresh
    browser.set_window_size(1360, 2000)  # the whole page in the picture
    try:
        shot(browser, "box")
    finally:
        browser.set_window_size(1360, 1000)


# The screen as the page shows it: its size, how many screenshots came, and every 16th pixel's grey
SHOWN_SCREEN = """
const img = document.getElementById("screen");
if (!img || !img.complete || !img.naturalWidth) return null;
const c = document.createElement("canvas");
c.width = img.naturalWidth; c.height = img.naturalHeight;
const g = c.getContext("2d"); g.drawImage(img, 0, 0);
const d = g.getImageData(0, 0, c.width, c.height).data;
const grey = []; for (let i = 0; i < d.length; i += 64) grey.push(d[i] + d[i + 1] + d[i + 2]);
return [c.width, c.height, Number(img.dataset.loaded || 0), grey];
"""


def _changed(a: list[int], b: list[int]) -> int:
    return sum(x != y for x, y in zip(a, b, strict=True))


def test_a_desktop_boxs_live_screen(browser: WebDriver, env: Env, sandbox: Sandbox) -> None:
    """The box's page shows its screen, a screenshot reloaded every second: what the box draws comes."""
    needs_desktop()
    browser.get(f"{env.url}/console/boxes/{sandbox.id}")  # a box that is no desktop: no screen on its page
    wait_until(lambda: status_on_page(browser) == "active", "the plain box's page")
    assert not browser.find_elements(By.ID, "screen")
    desk = Sandbox.create(name="console-desk", from_template="desktop", resolution=(800, 600), api_key=env.key_a,
                          base_url=env.url)
    try:
        browser.get(f"{env.url}/console/boxes/{desk.id}")
        wait_until(lambda: (browser.execute_script(SHOWN_SCREEN) or [0, 0, 0])[2] >= 2, "two screenshots shown")
        width, height, _, before = browser.execute_script(SHOWN_SCREEN)
        assert (width, height) == (800, 600)
        desk.commands.spawn("mousepad")
        wait_until(lambda: desk.commands.run("xdotool search --onlyvisible --class mousepad || true").stdout.strip(),
                   "the editor's window", timeout=60)
        desk.desktop.type("seen in the console")
        # the editor's window is thousands of the samples; the panel's clock, a minute on, under a hundred
        wait_until(lambda: _changed(before, browser.execute_script(SHOWN_SCREEN)[3]) > 1000,
                   "the editor on the page's screen")
        browser.execute_script("document.getElementById('screen').closest('section').scrollIntoView()")
        time.sleep(2)  # a screenshot or two more: the typed text in the picture
        shot(browser, "desktop")
        signed_out = httpx.get(f"{env.url}/console/boxes/{desk.id}/screen.png")
        assert signed_out.status_code == 303 and signed_out.headers["location"] == "/console/sign-in"
        assert not [e for e in desk.get_audit_log().entries if e.op == "desktop" and "scrot" in e.detail]
        desk.pause()  # the page says there is no screen now, and its reloads never resume the box
        wait_until(lambda: browser.find_element(By.ID, "screen-status").is_displayed(), "no screen, said")
        paused = httpx.get(f"{env.url}/console/boxes/{desk.id}/screen.png",
                           cookies={"hutch_console": console_cookie(browser)["value"]})
        assert paused.status_code == 409 and "paused" in paused.text
        time.sleep(4)
        assert desk.get_info().status == "paused"
    finally:
        desk.kill()


def text_of(driver: WebDriver, element_id: str) -> str:
    try:
        return driver.find_element(By.ID, element_id).text
    except WebDriverException:  # swapped out by a refresh while read
        return ""


def screen(driver: WebDriver) -> str:
    found = driver.find_elements(By.CSS_SELECTOR, "#terminal .xterm-rows")
    return found[0].text if found else ""


def audited(driver: WebDriver, op: str) -> list[WebElement]:
    return driver.find_elements(By.CSS_SELECTOR, f"#audit tr.op[data-op={op}]")


def test_a_file_downloaded_from_the_browser(browser: WebDriver, env: Env, sandbox: Sandbox, downloads: Path) -> None:
    sandbox.files.write("/home/user/report.txt", "four score\n")
    browser.get(f"{env.url}/console/boxes/{sandbox.id}")
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, "#files tr[data-name='report.txt'] a.file"), "the file listed")
    browser.find_element(By.CSS_SELECTOR, "#files tr[data-name='report.txt'] a.file").click()
    got = downloads / "report.txt"
    wait_until(lambda: got.exists() and got.read_text() == "four score\n", "the file downloaded")
    wait_until(lambda: audited(browser, "file_read"), "the read in the audit log")


def test_the_network_log_shows_a_denied_connection(browser: WebDriver, env: Env, sandbox: Sandbox) -> None:
    # the metadata address: always denied, by the box's own egress proxy (nothing leaves the host)
    out = sandbox.commands.run("curl -s -o /dev/null -w '%{http_code}' http://169.254.169.254/latest/meta-data/")
    assert out.stdout == "403"
    browser.get(f"{env.url}/console/boxes/{sandbox.id}")
    denied = "#network tr.conn[data-verdict=denied]"
    wait_until(lambda: text_at(browser, denied), "the denied connection")
    row = text_at(browser, denied)
    assert "169.254.169.254:80" in row and "always_denied" in row


def test_another_teams_box_is_not_there(browser: WebDriver, env: Env, sandbox: Sandbox) -> None:
    theirs = Sandbox.create(name="not-yours", api_key=env.key_b, base_url=env.url)
    try:
        browser.get(f"{env.url}/console/boxes")
        wait_until(lambda: sandbox.id in rows(browser), "the list loaded")
        assert theirs.id not in rows(browser) and "not-yours" not in browser.page_source
        for path in ("", "/part/info", "/part/files", "/part/network", "/part/audit", "/download?path=/etc/hostname",
                     "/screen.png"):
            browser.get(f"{env.url}/console/boxes/{theirs.id}{path}")
            assert "404" in browser.title or "404" in browser.page_source[:2000], path
        assert theirs.get_info().status == "active"
    finally:
        theirs.kill()


class _Attacker(http.server.BaseHTTPRequestHandler):
    """Another origin's page (another port on loopback): a form that posts to the console."""

    target = ""

    def do_GET(self) -> None:
        page = (f'<form id="f" method="post" action="{self.target}"><input name="x" value="1"></form>'
                '<script>document.getElementById("f").submit()</script>').encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, *_args: Any) -> None:
        pass


def test_a_change_from_another_origin_or_without_the_token_is_refused(browser: WebDriver, env: Env,
                                                                       sandbox: Sandbox) -> None:
    kill = f"{env.url}/console/boxes/{sandbox.id}/kill"
    _Attacker.target = kill
    attacker = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _Attacker)
    threading.Thread(target=attacker.serve_forever, daemon=True).start()
    try:
        # the same site (loopback), so SameSite lets the cookie go: the Origin check refuses it
        browser.get(f"http://127.0.0.1:{attacker.server_address[1]}/")
        wait_until(lambda: browser.current_url == kill, "the forged post sent")
        wait_until(lambda: browser.find_elements(By.ID, "error-message"), "the refusal")
        assert "403" in browser.title
    finally:
        attacker.shutdown()
        attacker.server_close()
    assert sandbox.get_info().status == "active"

    cookie = console_cookie(browser)["value"]
    browser.get(f"{env.url}/console/boxes")
    csrf = str(browser.find_element(By.TAG_NAME, "body").get_attribute("data-csrf"))
    jar = {"hutch_console": cookie}
    no_token = httpx.post(kill, cookies=jar, headers={"Origin": env.url})
    wrong_origin = httpx.post(kill, cookies=jar, headers={"Origin": "http://127.0.0.1:1", "X-CSRF-Token": csrf})
    no_origin = httpx.post(kill, cookies=jar, headers={"X-CSRF-Token": csrf})
    wrong_token = httpx.post(kill, cookies=jar, headers={"Origin": env.url, "X-CSRF-Token": csrf[:-1] + "x"})
    assert [r.status_code for r in (no_token, wrong_origin, no_origin, wrong_token)] == [403] * 4
    ws_key = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
              "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Origin": "http://127.0.0.1:1"}
    hijack = httpx.get(f"{env.url}/console/boxes/{sandbox.id}/processes/1/ws?csrf={csrf}", cookies=jar, headers=ws_key)
    assert hijack.status_code == 403, "a WebSocket from another origin is refused at its handshake"
    assert sandbox.get_info().status == "active", "nothing changed"
    done = httpx.post(f"{env.url}/console/boxes/{sandbox.id}/pause", cookies=jar,
                      headers={"Origin": env.url, "X-CSRF-Token": csrf, "HX-Request": "true"}, timeout=120)
    assert done.status_code == 204 and sandbox.get_info().status == "paused", "the same call with both goes through"


def test_the_other_pages_render_and_show_no_secret_value(browser: WebDriver, env: Env) -> None:
    value = f"sk-console-{time.time_ns()}"
    secret = Secret.create(f"console-{time.time_ns()}", value, provider="anthropic", api_key=env.key_a, base_url=env.url)
    try:
        for name, path in (("templates", "/console/templates"), ("secrets", "/console/secrets"),
                           ("fleet", "/console/fleet")):
            browser.get(f"{env.url}{path}")
            wait_until(lambda: browser.find_elements(By.TAG_NAME, "h1"), name)
            assert browser.find_element(By.TAG_NAME, "h1").text.lower() == name
            shot(browser, name)
        browser.get(f"{env.url}/console/secrets")
        assert secret.name in browser.page_source and value not in browser.page_source
        browser.get(f"{env.url}/console/secrets/{secret.name}")
        assert "anthropic" in browser.page_source and value not in browser.page_source
        browser.get(f"{env.url}/console/templates")
        assert browser.find_elements(By.CSS_SELECTOR, "tr.template[data-name='hutch/base']"), "the system template"
    finally:
        secret.delete()


def test_a_builds_log_live(browser: WebDriver, env: Env) -> None:
    name = f"console-{int(time.time() * 1000)}"
    template = Template.create(name, steps=[RunStep(run="echo console-build-begins; sleep 2; echo console-build-ends")],
                               api_key=env.key_a, base_url=env.url)
    try:
        browser.get(f"{env.url}/console/templates")
        link = f"tr.template[data-name='{name}'] a.build"
        wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, link), "the build listed")
        browser.find_element(By.CSS_SELECTOR, link).click()
        log = "build-log"
        wait_until(lambda: "console-build-begins" in text_of(browser, log), "the log as it is written", timeout=300)
        wait_until(lambda: browser.find_element(By.ID, log).get_attribute("data-ended") == "yes", "followed to the end",
                   timeout=300)
        assert "console-build-ends" in text_of(browser, log) and "the build ended: ready" in text_of(browser, log)
        assert text_of(browser, "build-status") == "ready"
        shot(browser, "build")
    finally:
        template.delete()


HOSTILE = '<img src=x id=injected onerror="document.title=1"><script>document.title=2</script>'


def volume_row(name: str) -> str:
    return f"#volume-rows tr.volume[data-name='{name}']"


def test_a_volume_made_mounted_and_deleted_from_its_page(browser: WebDriver, env: Env) -> None:
    name, noted = f"console-vol-{time.time_ns()}", f"console-noted-{time.time_ns()}"
    # names cannot carry markup; metadata (set through the API) can, and is shown as text
    Volume.create(noted, size_mib=16, metadata={"note": HOSTILE}, api_key=env.key_a, base_url=env.url)
    box: Sandbox | None = None
    try:
        browser.get(f"{env.url}/console/volumes")
        wait_until(lambda: browser.find_elements(By.ID, "new-volume"), "the volumes page")
        assert browser.find_element(By.CSS_SELECTOR, "header nav a[href='/console/volumes']").text == "Volumes"
        browser.find_element(By.CSS_SELECTOR, "#new-volume input[name=name]").send_keys(name)
        browser.find_element(By.CSS_SELECTOR, "#new-volume input[name=size_mib]").send_keys("64")
        browser.find_element(By.ID, "create-volume").click()
        row = volume_row(name)
        wait_until(lambda: text_at(browser, row), "the new volume listed, without a reload")
        vol = Volume.get(name, api_key=env.key_a, base_url=env.url)
        assert vol.size_mib == 64 and vol.id in text_at(browser, row) and "64 MiB" in text_at(browser, row)
        assert browser.find_element(By.CSS_SELECTOR, "#new-volume input[name=name]").get_attribute("value") == ""
        assert text_at(browser, f"{volume_row(noted)} td.meta") == f"note={HOSTILE}"
        assert not browser.find_elements(By.ID, "injected") and browser.title == "Volumes · hutch console"

        # a box that mounts it: the mount on the box's page, the box in the volume's row
        box = Sandbox.create(name="console-volumes", volumes={"/mnt/v": vol}, api_key=env.key_a, base_url=env.url)
        assert box.commands.run("echo kept > /mnt/v/note").exit_code == 0
        browser.get(f"{env.url}/console/boxes/{box.id}")
        mount = f"#info .mount[data-volume='{vol.id}']"
        wait_until(lambda: text_at(browser, mount), "the box's mount")
        assert text_at(browser, mount) == f"/mnt/v ← {name} (read-write)"
        wait_until(lambda: click(browser, f"{mount} a"), "the link to the volume")
        wait_until(lambda: browser.current_url == f"{env.url}/console/volumes#volume-{vol.id}", "the volumes page")
        mounted_by = f"{row} td.mounted a[data-box='{box.id}']"
        wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, mounted_by), "the box in the volume's row")
        assert browser.find_element(By.CSS_SELECTOR, mounted_by).get_attribute("href") == f"{env.url}/console/boxes/{box.id}"

        # its delete is refused while the box lives, and the page says why
        wait_until(lambda: click(browser, f"{row} button[data-action=delete]"), "the delete button")
        wait_until(lambda: accept_confirm(browser), "the page asks first")
        wait_until(lambda: "mounted by" in text_of(browser, "flash"), "the refusal on the page")
        assert text_of(browser, "flash").startswith(f"409: volume '{name}' is mounted by sandbox(es) {box.id}")
        assert Volume.get(name, api_key=env.key_a, base_url=env.url).files.read_text("/note") == "kept\n"

        box.kill()
        box = None
        wait_until(lambda: "—" in text_at(browser, f"{row} td.mounted"), "the row without the box")
        wait_until(lambda: click(browser, f"{row} button[data-action=delete]"), "the delete button")
        wait_until(lambda: accept_confirm(browser), "the page asks first")
        wait_until(lambda: not text_at(browser, row), "the volume gone from the list")
        assert browser.find_element(By.ID, "flash").get_attribute("hidden") is not None, "the earlier refusal cleared"
        with pytest.raises(NotFoundError):
            Volume.get(name, api_key=env.key_a, base_url=env.url)

        # a name with markup is refused by the server (not only by the form's pattern), and nothing is made
        csrf = str(browser.find_element(By.TAG_NAME, "body").get_attribute("data-csrf"))
        refused = httpx.post(f"{env.url}/console/volumes", data={"name": "<b>x</b>", "size_mib": "16"},
                             cookies={"hutch_console": console_cookie(browser)["value"]},
                             headers={"Origin": env.url, "X-CSRF-Token": csrf, "HX-Request": "true"})
        assert refused.status_code == 400 and "<b>x" not in refused.text
        assert [v.name for v in Volume.list(api_key=env.key_a, base_url=env.url) if "<" in v.name] == []
    finally:
        if box is not None:
            box.kill()
        for ref in (name, noted):
            try:
                Volume.delete_by_id(ref, api_key=env.key_a, base_url=env.url)
            except NotFoundError:
                pass


def test_events_and_a_webhook_from_their_pages(browser: WebDriver, env: Env) -> None:
    box = Sandbox.create(name="console-evented", metadata={"note": HOSTILE}, api_key=env.key_a, base_url=env.url)
    box.kill()
    browser.get(f"{env.url}/console/events")
    killed = f"#event-rows tr.event[data-type='sandbox.killed'] a[href='/console/boxes/{box.id}']"
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, killed), "the box's kill among the events")
    assert browser.find_element(By.CSS_SELECTOR, "header nav a[href='/console/events']").text == "Events"
    assert browser.find_elements(By.CSS_SELECTOR, "#event-rows tr.event[data-type='sandbox.created']")
    # a webhook registered from its page (a public address, disabled at once: nothing leaves this machine)
    browser.get(f"{env.url}/console/webhooks")
    wait_until(lambda: browser.find_elements(By.ID, "new-webhook"), "the webhooks page")
    browser.find_element(By.CSS_SELECTOR, "#new-webhook input[name=url]").send_keys("https://93.184.215.14/hooks")
    browser.find_element(By.CSS_SELECTOR, "#new-webhook input[name=types]").send_keys("sandbox.killed")
    browser.find_element(By.CSS_SELECTOR, "#new-webhook input[name=name]").send_keys(HOSTILE)
    browser.find_element(By.ID, "create-webhook").click()
    wait_until(lambda: text_at(browser, "#webhook-secret"), "the secret, shown once")
    secret = text_at(browser, "#webhook-secret")
    made = [w for w in Webhooks.list(api_key=env.key_a, base_url=env.url) if w.url == "https://93.184.215.14/hooks"]
    try:
        assert len(made) == 1 and secret.startswith("whsec_") and made[0].types == ["sandbox.killed"]
        row = f"#webhook-{made[0].id}"
        wait_until(lambda: click(browser, f"{row} button[data-action=disable]"), "the disable button")
        wait_until(lambda: not Webhooks.get(made[0].id, api_key=env.key_a, base_url=env.url).enabled, "disabled")
        wait_until(lambda: "disabled" in text_at(browser, f"{row} td.state"), "the row says so")
        assert text_at(browser, f"{row} td:first-child") == HOSTILE and not browser.find_elements(By.ID, "injected")
        browser.get(f"{env.url}/console/webhooks")
        wait_until(lambda: text_at(browser, row), "the row after a reload")
        assert secret not in browser.page_source, "the secret is not shown again"
        # a private address is refused on the page as by the API, and nothing is made
        browser.find_element(By.CSS_SELECTOR, "#new-webhook input[name=url]").send_keys("http://10.0.0.1/x")
        browser.find_element(By.ID, "create-webhook").click()
        wait_until(lambda: "webhook URL refused" in text_of(browser, "flash"), "the refusal on the page")
        assert [w.url for w in Webhooks.list(api_key=env.key_a, base_url=env.url) if "10.0.0.1" in w.url] == []
        wait_until(lambda: click(browser, f"{row} button[data-action=delete]"), "the delete button")
        wait_until(lambda: accept_confirm(browser), "the page asks first")
        wait_until(lambda: not text_at(browser, row), "the webhook gone from the list")
    finally:
        for w in made:
            with contextlib.suppress(NotFoundError):
                Webhooks.delete(w.id, api_key=env.key_a, base_url=env.url)
