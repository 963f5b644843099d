"""testlib.py — what the unittest-based integration suites (api_tests.py,
limits_tests.py, fair_tests.py, ...) share beyond the HTTP client: the
build's paths, polling, the long-context test model, an API keys file, the
OpenAI error-object assertion, a test group with a gpt2d of its own, and a
runner that prints one line per test and can run a subset by name.
Standard library only."""

import os
import subprocess
import sys
import time
import traceback
import unittest

from gpt2d_client import Server, error_problem

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.environ.get("GPT2D_SRCDIR", os.path.join(HERE, "..", ".."))
BUILDDIR = os.environ.get("GPT2D_BUILDDIR", ".")
DATA = os.environ.get("GPT2D_TEST_DATA", os.path.join(BUILDDIR, "tests", "data"))
TINY = os.path.join(DATA, "models", "tiny")
GPT2D = os.path.join(BUILDDIR, "src", "gpt2d")


def wait_for(predicate, timeout, interval=0.02):
    """Polls predicate() until it is truthy or timeout seconds pass;
    returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def long_context_model(out, tiny, seed):
    """tiny's shape (2 layers, 4 heads, 64 wide) with a 1024-token context,
    random weights from `seed`, made once into `out` with tiny's vocabulary:
    room for generations long enough to be cancelled, queued behind,
    drained or timed out.  Returns `out`."""
    if not os.path.exists(os.path.join(out, "model.safetensors")):
        subprocess.run(
            [sys.executable, os.path.join(SRCDIR, "tests", "reference",
                                          "make_model.py"),
             out, "--vocab-dir", tiny, "--n-layer", "2", "--n-head", "4",
             "--n-embd", "64", "--n-ctx", "1024", "--seed", str(seed)],
            check=True, stdout=subprocess.DEVNULL,
            env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    return out


def key_file(path, lines):
    """Writes an API keys file of `lines` ("KEY [name=N] [limits]") to
    `path`; returns `path`."""
    with open(path, "w", encoding="ascii") as f:
        f.write("# test keys\n" + "".join(line + "\n" for line in lines))
    return path


class Case(unittest.TestCase):
    """Assertions every suite's tests share."""

    maxDiff = 4000

    def assert_error(self, r, status, param="any", allow=None):
        """`r` is an OpenAI error object with this status and the type the
        error table gives it; with its `param` unless "any" (a tuple: one
        of them), and with this Allow header when `allow` is given.
        Returns the error object."""
        problem = error_problem(r, status, param, allow=allow)
        if problem is not None:
            self.fail(problem)
        return r.json["error"]

    def assert_clean_log(self, server):
        report = server.sanitizer_report()
        if report:
            self.fail("%s: sanitizer report:\n%s" % (server.name, report))


class ServerCase(Case):
    """A group with a gpt2d of its own, started before its first test and
    stopped (SIGTERM: exit 0, no sanitizer report) after its last.
    Subclasses set WORKDIR (where its log and port file go), NAME, ARGS,
    ENV and MODEL (a function that returns a model directory; tiny when
    None)."""

    WORKDIR = None
    NAME = "aux"
    ARGS = ()
    ENV = None
    MODEL = None

    @classmethod
    def setUpClass(cls):
        model = cls.MODEL() if cls.MODEL else TINY
        cls.server = Server(GPT2D, model, cls.WORKDIR, list(cls.ARGS),
                            env=cls.ENV, name=cls.NAME)
        cls.server.start()

    @classmethod
    def tearDownClass(cls):
        rc, _ = cls.server.stop()
        if rc != 0:
            raise AssertionError("%s exited %r on SIGTERM:\n%s"
                                 % (cls.NAME, rc, cls.server.log_tail()))
        report = cls.server.sanitizer_report()
        if report:
            raise AssertionError("%s: sanitizer report:\n%s"
                                 % (cls.NAME, report))

    def client(self, **kw):
        return self.server.client(**kw)

    def log_text(self):
        with open(self.server.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")


class Result(unittest.TestResult):
    """Prints one line per test as it finishes."""

    def __init__(self, module_name):
        unittest.TestResult.__init__(self)
        self.module_name = module_name
        self.passed = 0
        self.failed_names = []
        self._t0 = 0.0

    def startTest(self, test):
        unittest.TestResult.startTest(self, test)
        self._t0 = time.monotonic()

    def _line(self, status, test):
        name = test.id().replace(self.module_name + ".", "")
        print("%s: %s (%.2fs)" % (status, name, time.monotonic() - self._t0),
              flush=True)

    def addSuccess(self, test):
        self.passed += 1
        self._line("ok", test)

    def _fail(self, test, err):
        # a failing subtest fails its test once; a failing setUpClass
        # counts as one failure of its class
        owner = getattr(test, "test_case", test)
        if owner.id() not in self.failed_names:
            self.failed_names.append(owner.id())
        self._line("FAIL", test)
        # the test's own frames and the whole message (it may carry a
        # server log excerpt); unittest's frames say nothing
        etype, value, tb = err
        frames = [f for f in traceback.extract_tb(tb)
                  if "unittest" not in f.filename]
        text = "".join(traceback.format_list(frames[-3:])
                       + traceback.format_exception_only(etype, value))
        print("\n".join("    " + ln for ln in text.splitlines()[:80]),
              flush=True)

    def addFailure(self, test, err):
        self._fail(test, err)

    def addError(self, test, err):
        self._fail(test, err)

    def addSubTest(self, test, subtest, err):
        if err is not None:
            self._fail(subtest, err)


def _keep(suite, names):
    """The tests of `suite` whose id contains one of `names`."""
    out = unittest.TestSuite()
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            sub = _keep(t, names)
            if sub.countTestCases():
                out.addTest(sub)
        elif any(a in t.id() for a in names):
            out.addTest(t)
    return out


def run_module(module_name, names, label, summary_path=None):
    """Runs the tests of module `module_name` (those whose id contains one
    of `names`, or all), prints "LABEL: P passed, F failed", writes "P F"
    to summary_path when given; returns the exit status."""
    suite = unittest.TestLoader().loadTestsFromModule(sys.modules[module_name])
    if names:
        suite = _keep(suite, names)
    result = Result(module_name)
    suite.run(result)
    failed = len(result.failed_names)
    print("%s: %d passed, %d failed" % (label, result.passed, failed),
          flush=True)
    if summary_path:
        with open(summary_path, "w", encoding="ascii") as f:
            f.write("%d %d\n" % (result.passed, failed))
    return 0 if failed == 0 else 1
