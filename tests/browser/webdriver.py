"""webdriver.py — what the headless-Chromium tests share: a minimal W3C
WebDriver client for one chromedriver session, and a runner for a list of
tests that share one browser.

Standard library only (no npm package to fetch, so it runs offline and in a
read-only source tree).  Used by playground_test.py and openai_sdk_test.py.

    add_browser_arguments(argparse_parser)
        --chromium, --chromedriver and the tests' names
    run_browser_tests(TESTS, ctx, select, chromium, chromedriver, out)
        starts Chromium (headless, a fresh profile), runs each test(ctx)
        whose name contains one of `select` (all when empty) with
        ctx["browser"] set, prints "PASS: name" / "FAIL: name" and a
        screenshot DIR/failed-NAME.png per failure, then "N passed,
        N failed"; returns the exit status.
"""

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"


class WebDriverError(Exception):
    pass


class Browser:
    """A minimal W3C WebDriver client for one chromedriver session."""

    def __init__(self, chromedriver, chromium, profile_dir, log_path,
                 env=None):
        self.port = free_port()
        self.log = open(log_path, "wb")
        self.driver = subprocess.Popen(
            [chromedriver, "--port=%d" % self.port, "--allowed-ips=127.0.0.1"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.url = "http://127.0.0.1:%d" % self.port
        self.session = None
        deadline = time.monotonic() + 20
        while True:
            try:
                if self._call("GET", "/status")["ready"]:
                    break
            except (OSError, WebDriverError):
                pass
            if time.monotonic() > deadline or self.driver.poll() is not None:
                raise WebDriverError("chromedriver did not start")
            time.sleep(0.1)
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "pageLoadStrategy": "normal",
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu",
                    "--disable-background-networking", "--disable-quic",
                    "--no-first-run", "--disable-component-update",
                    "--disable-sync", "--disable-dev-shm-usage",
                    "--user-data-dir=" + profile_dir,
                    "--window-size=1280,1000", "--force-device-scale-factor=1",
                    "--lang=en-US",
                ],
            },
        }}}
        value = self._call("POST", "/session", caps)
        self.session = "/session/" + value["sessionId"]
        self.cmd("POST", "/timeouts", {"script": 30000, "pageLoad": 30000,
                                       "implicit": 0})

    def _call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path, data=data, method=method,
            headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                payload = json.load(resp)
        except urllib.error.HTTPError as e:
            payload = json.load(e)
            v = payload.get("value", {})
            raise WebDriverError("%s %s: %s: %s" % (
                method, path, v.get("error"), v.get("message", "")[:400]))
        return payload.get("value")

    def cmd(self, method, path, body=None):
        return self._call(method, self.session + path, body)

    def quit(self):
        try:
            if self.session:
                self.cmd("DELETE", "")
        except (OSError, WebDriverError):
            pass
        self.driver.terminate()
        try:
            self.driver.wait(10)
        except subprocess.TimeoutExpired:
            self.driver.kill()
            self.driver.wait()
        self.log.close()

    # ---- page helpers ----

    def go(self, url):
        self.cmd("POST", "/url", {"url": url})

    def js(self, script, *args):
        return self.cmd("POST", "/execute/sync",
                        {"script": script, "args": list(args)})

    def find(self, css):
        return self.cmd("POST", "/element",
                        {"using": "css selector", "value": css})[ELEMENT]

    def finds(self, css):
        return [e[ELEMENT] for e in self.cmd(
            "POST", "/elements", {"using": "css selector", "value": css})]

    def click(self, css):
        self.cmd("POST", "/element/%s/click" % self.find(css), {})

    def clear(self, css):
        self.cmd("POST", "/element/%s/clear" % self.find(css), {})

    def type(self, css, text):
        self.cmd("POST", "/element/%s/value" % self.find(css), {"text": text})

    def text(self, css):
        return self.cmd("GET", "/element/%s/text" % self.find(css))

    def displayed(self, css):
        return self.cmd("GET", "/element/%s/displayed" % self.find(css))

    def hover(self, element_id):
        self.cmd("POST", "/actions", {"actions": [{
            "type": "pointer", "id": "mouse",
            "parameters": {"pointerType": "mouse"},
            "actions": [{"type": "pointerMove", "duration": 0, "x": 0, "y": 0,
                         "origin": {ELEMENT: element_id}}]}]})
        self.cmd("DELETE", "/actions")

    def keys(self, *keys):
        acts = []
        for k in keys:
            acts += [{"type": "keyDown", "value": k}, {"type": "keyUp", "value": k}]
        self.cmd("POST", "/actions", {"actions": [
            {"type": "key", "id": "keyboard", "actions": acts}]})
        self.cmd("DELETE", "/actions")

    def chord(self, *keys):
        """Presses keys together (modifiers first), then releases them."""
        acts = [{"type": "keyDown", "value": k} for k in keys]
        acts += [{"type": "keyUp", "value": k} for k in reversed(keys)]
        self.cmd("POST", "/actions", {"actions": [
            {"type": "key", "id": "keyboard", "actions": acts}]})
        self.cmd("DELETE", "/actions")

    def screenshot(self, path, element=None):
        """The viewport, or one element of the page."""
        what = "/screenshot" if element is None else "/element/%s/screenshot" % element
        png = base64.b64decode(self.cmd("GET", what))
        with open(path, "wb") as f:
            f.write(png)

    def set_window(self, width, height):
        self.cmd("POST", "/window/rect", {"width": width, "height": height})

    def console(self):
        """Browser console entries since the last call (chromedriver's log)."""
        return self.cmd("POST", "/se/log", {"type": "browser"}) or []

    def wait(self, what, predicate, timeout=20.0):
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError("timed out after %.0fs waiting for %s"
                                     % (timeout, what))
            time.sleep(0.05)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def add_browser_arguments(ap):
    """The arguments every browser suite takes: --chromium, --chromedriver,
    and the names (substrings) of the tests to run."""
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--chromedriver", default="/usr/bin/chromedriver")
    ap.add_argument("select", nargs="*")


def run_browser_tests(tests, ctx, select, chromium, chromedriver, out):
    """Runs `tests` in order in one browser; see the module's docstring."""
    # The profile, and Chromium's own scratch files (its TMPDIR: it leaves
    # org.chromium.Chromium.scoped_dir.* behind when stopped), in one
    # directory removed at the end.
    scratch = tempfile.mkdtemp(prefix="gpt2d-chromium.")
    profile = os.path.join(scratch, "profile")
    os.mkdir(profile)
    os.mkdir(os.path.join(scratch, "tmp"))
    browser = None
    passed = failed = 0
    try:
        browser = Browser(chromedriver, chromium, profile,
                          os.path.join(out, "chromedriver.log"),
                          env=dict(os.environ, TMPDIR=os.path.join(scratch, "tmp")))
        ctx["browser"] = browser
        for test in tests:
            if select and not any(s in test.__name__ for s in select):
                continue
            t0 = time.monotonic()
            try:
                test(ctx)
                passed += 1
                print("PASS: %s (%.1fs)" % (test.__name__, time.monotonic() - t0))
            except Exception:           # report every failure, go on
                failed += 1
                print("FAIL: %s" % test.__name__)
                traceback.print_exc(file=sys.stdout)
                try:
                    browser.screenshot(os.path.join(
                        out, "failed-%s.png" % test.__name__))
                except (OSError, WebDriverError):
                    pass
            sys.stdout.flush()
    except WebDriverError as e:
        failed += 1
        print("FAIL: the browser: %s" % e)
    finally:
        if browser is not None:
            browser.quit()
        shutil.rmtree(scratch, ignore_errors=True)
    print("%d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 and passed > 0 else 1
