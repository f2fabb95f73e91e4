"""The main job against MLflow's own tracking server (not the tests' fake), read back with MLflow's
own Python client. Run by ctest (label tracking) as

    python3 mlflow_server_test.py --binary <fashion_mnist> --workdir <dir> <scenario>

with any Python: it runs itself again with the venv's Python, scripts/tracking_venv.sh's (mlflow
from PyPI). Each scenario starts
`mlflow server` on 127.0.0.1 at a free port (an SQLite backend store and a local artifact root in
the work directory) and stops it at the end, also on failure. Scenarios:

run      the job (2 epochs of 4 steps) with MLFLOW_TRACKING_URI set: the MLflow run is FINISHED, its
         metrics are exactly the scalars of stats.json (the same steps and values; a NaN or an
         infinity as MLflow stores them), its params hold the job's hyper-parameters, its tags
         MLflow's own (run name, source, user).
resume   the job (30 epochs) stopped by SIGTERM once the first epoch's metrics reached the server, then the
         same command again: one MLflow run, KILLED then RUNNING then FINISHED, whose metrics are
         stats.json's, no step logged twice.

secrets  MLFLOW_TRACKING_URI with a user and password in it, and MLFLOW_TRACKING_TOKEN set (the
         server has no authentication and accepts the requests): the run is FINISHED as above,
         and neither the password nor the token appears in the console, log.log, stats.json or
         any other file of the log directory.
bad_servers  training is unaffected (exit 0, every checkpoint written) and the log says what went
         wrong, naming the server, for: an HTTP server that answers every request with an HTML
         page (a proxy's login page), and an HTTPS server whose certificate nobody signed (the
         warning naming MLFLOW_TRACKING_SERVER_CERT_PATH; with it set to that certificate, TLS
         passes and the HTML page is named). Neither is tried again: one warning, nothing more
         sent, the job's end not waiting for the flush timeout, the final line saying why. A
         file: or sqlite: URI (MLflow's own stores, not a server) is refused before training
         with the command that starts a server.

With --child (tests/tracking/tracking_child, a small run of 3 steps an epoch):
limits   NaN, +-infinity, the largest double and a denormal, names MLflow refuses (':' on Windows,
         '//', '..', non-ASCII, 300 bytes), 1500 metrics in one step, a 7000-byte param: the server
         holds every metric under the name the monitor made of it, NaN as NaN and an infinity as
         +-1.7976931348623157e308 (MLflow's SQL store), each step once; the long param cut to
         6000 bytes with a warning. The same values sent as they are, straight to the server's
         REST API, are refused with 400 (what the monitor's splitting and renaming avoid), but
         the long param, which MLflow 3 cuts itself (MLFLOW_TRUNCATE_LONG_VALUES; older servers
         refuse it).
server_stopped  the server stopped after the first epoch reached it: training goes on to the end
         (exit 0, stats.json complete); the job ends within the flush timeout of its end, and the
         log counts exactly the records of the later epochs as not sent, and says the run's end
         was not sent (the run stays RUNNING with the first epoch's metrics).
server_restarted  the server stopped after the first epoch and started again (same store, same
         port) after the second epoch's delivery failed: the records held back arrive, each step
         once, the run ends FINISHED with every metric of stats.json, and the log says so.

Without the venv the test prints how to make it and exits 77 (ctest: skipped).
The tests' fake server (tests/support/fake_mlflow.cpp) stays for the unit tests.
"""

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tracking_support import free_port, read, stop_server, use_venv  # noqa: E402
import tracking_support  # noqa: E402

FLAGS = ["--train-limit", "256", "--val-limit", "64", "--batch-size", "32", "--val-batch-size",
         "64", "--steps-per-epoch", "4", "--lr", "0.05", "--threads", "1", "--max-val-error", "1"]
EXPERIMENT = "trainpack-tracking-test"
JOB_TIMEOUT = 300
RESUME_EPOCHS = 30  # long enough (about 15 s) for SIGTERM to land mid-run on a busy machine
SERVER_START_TIMEOUT = 120


class MLflowServer:
    """`mlflow server` on 127.0.0.1 with its stores under `workdir`; stopped on exit."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.log = os.path.join(workdir, "mlflow-server.log")
        self.proc = None

    def start(self):
        store = os.path.join(self.workdir, "mlflow.db")
        artifacts = os.path.join(self.workdir, "mlartifacts")
        mlflow = os.path.join(os.path.dirname(sys.executable), "mlflow")
        cmd = [mlflow, "server", "--host", "127.0.0.1", "--port", str(self.port),
               "--backend-store-uri", f"sqlite:///{store}", "--default-artifact-root", artifacts,
               "--workers", "1"]
        with open(self.log, "ab") as f:
            self.proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                fail(f"mlflow server exited with {self.proc.returncode} at start", self.log)
            try:
                with urllib.request.urlopen(self.uri + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.25)
        fail(f"mlflow server did not answer /health within {SERVER_START_TIMEOUT} s", self.log)

    def stop(self):
        stop_server(self.proc)
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False

    def restart(self):
        """Started again on the same port with the same stores (a server restarted)."""
        self.stop()
        return self.start()


def job_env(uri):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "COMET_"))}
    env.update(MLFLOW_TRACKING_URI=uri, MLFLOW_EXPERIMENT_NAME=EXPERIMENT,
               OMP_WAIT_POLICY="PASSIVE")
    return env


def start_job(binary, uri, logdir, epochs, out):
    with open(out, "ab") as f:
        return subprocess.Popen([binary] + FLAGS + ["--max-epoch", str(epochs), "--logdir", logdir],
                                stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=job_env(uri))


def finish(proc, out, what, expected=0):
    try:
        status = proc.wait(timeout=JOB_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        fail(f"{what} did not end within {JOB_TIMEOUT} s", out)
    if status != expected:
        fail(f"{what} exited with {status}, expected {expected}", out)


def mlflow_name(name):
    """A statistic's name as MLflowMonitor sends it (docs/experiment-tracking.md): every character
    MLflow refuses in a name, '_' (one per UTF-8 character); empty and '.' path parts dropped, '..'
    made '__'; at most 250 bytes."""
    clean = "".join(c if c.isascii() and (c.isalnum() or c in "_-. /") else "_" for c in name)
    parts = [("__" if part == ".." else part) for part in clean.split("/") if part not in ("", ".")]
    return "/".join(parts)[:250].rstrip("/") or "_"


def stats_points(logdir):
    """{metric name as sent: [(step, value)]} of stats.json: every number but the counters."""
    from mlflow.utils.validation import _validate_metric_name
    points = {}
    for entry in json.loads(read(os.path.join(logdir, "stats.json"))):
        step = entry["global_step"]
        for key, value in entry.items():
            if key in ("global_step", "epoch_num") or not isinstance(value, (int, float)):
                continue
            name = mlflow_name(key)
            _validate_metric_name(name)  # MLflow's own rule: the name as sent must pass it
            points.setdefault(name, []).append((step, float(value)))
    return points


def same_value(a, b):
    """Equal as MLflow keeps a double: NaN equals NaN."""
    return (math.isnan(a) and math.isnan(b)) or a == b


def the_run(client):
    """The one run of the test's experiment."""
    experiment = client.get_experiment_by_name(EXPERIMENT)
    if experiment is None:
        fail(f"no experiment {EXPERIMENT!r} on the server")
    runs = client.search_runs([experiment.experiment_id])
    if len(runs) != 1:
        fail(f"{len(runs)} runs in experiment {EXPERIMENT!r}, expected one")
    return runs[0]


def check_metrics(client, run, logdir, out):
    """The run's metric histories are stats.json's scalars: same names, steps and values, each
    step once."""
    expected = stats_points(logdir)
    names = set(run.data.metrics)
    if names != set(expected):
        fail(f"the run's metrics {sorted(names)} are not stats.json's scalars {sorted(expected)}",
             out)
    for name, points in expected.items():
        history = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, name)]
        steps = [s for s, _ in history]
        if len(steps) != len(set(steps)):
            fail(f"metric {name}: a step logged twice: {sorted(steps)}", out)
        got = sorted(history)
        if len(got) != len(points) or not all(
                s == t and same_value(v, w) for (s, v), (t, w) in zip(got, sorted(points))):
            fail(f"metric {name}: the server holds {got}, stats.json {sorted(points)}", out)
    return sum(len(p) for p in expected.values())


def scenario_run(binary, workdir):
    from mlflow.tracking import MlflowClient
    with MLflowServer(workdir) as server:
        logdir = os.path.join(workdir, "run")
        out = os.path.join(workdir, "run.out")
        finish(start_job(binary, server.uri, logdir, 2, out), out, "the job")
        text = read(out)
        if f"sending the run to MLflow at {server.uri}" not in text:
            fail("the job did not say that it sends the run to MLflow", out)
        client = MlflowClient(server.uri)
        run = the_run(client)
        if run.info.status != "FINISHED":
            fail(f"the run's status is {run.info.status}, expected FINISHED", out)
        if f"/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}" not in text:
            fail("the job's log does not give the run's page", out)
        points = check_metrics(client, run, logdir, out)
        params = run.data.params
        if "learning_rate" not in params:
            fail(f"no param 'learning_rate' among {sorted(params)}", out)
        # The job's settings, as its flags gave them (FLAGS, --max-epoch 2; the defaults).
        for key, value in (("batch_size", "32"), ("max_epoch", "2"), ("seed", "42"),
                           ("ranks", "1"), ("weight_decay", "0.0001")):
            if params.get(key) != value:
                fail(f"param {key} is {params.get(key)!r}, expected {value!r}", out)
        tags = run.data.tags
        if tags.get("mlflow.runName") != "run":
            fail(f"mlflow.runName is {tags.get('mlflow.runName')!r}, expected the log "
                 "directory's name 'run'", out)
        for key in ("mlflow.source.name", "mlflow.user"):
            if not tags.get(key):
                fail(f"no tag {key!r} among {sorted(tags)}", out)
        print(f"run: MLflow {mlflow_version()} holds one FINISHED run with stats.json's "
              f"{len(run.data.metrics)} metrics ({points} points, each step once), "
              f"{len(params)} params and MLflow's tags")


def scenario_resume(binary, workdir):
    from mlflow.tracking import MlflowClient
    with MLflowServer(workdir) as server:
        client = MlflowClient(server.uri)
        logdir = os.path.join(workdir, "resume")
        out = os.path.join(workdir, "resume.out")
        proc = start_job(binary, server.uri, logdir, RESUME_EPOCHS, out)
        # SIGTERM once the first epoch's metrics are on the server.
        deadline = time.monotonic() + JOB_TIMEOUT
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                fail("the job ended (or hung) before its first epoch reached the server", out)
            experiment = client.get_experiment_by_name(EXPERIMENT)
            runs = client.search_runs([experiment.experiment_id]) if experiment else []
            if runs and "val-error-top1" in runs[0].data.metrics:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        finish(proc, out, "the job stopped by SIGTERM", 128 + signal.SIGTERM)
        stopped = the_run(client)
        if stopped.info.status != "KILLED":
            fail(f"after SIGTERM the run is {stopped.info.status}, expected KILLED", out)
        check_metrics(client, stopped, logdir, out)
        params_before = dict(stopped.data.params)

        out2 = os.path.join(workdir, "resume2.out")
        finish(start_job(binary, server.uri, logdir, RESUME_EPOCHS, out2), out2, "the resumed job")
        run = the_run(client)
        if run.info.run_id != stopped.info.run_id:
            fail("the resumed job logged into another MLflow run", out2)
        if run.info.status != "FINISHED":
            fail(f"after the resume the run is {run.info.status}, expected FINISHED", out2)
        points = check_metrics(client, run, logdir, out2)
        if dict(run.data.params) != params_before:
            fail("the resumed job changed the run's params", out2)
        print(f"resume: stopped by SIGTERM after epoch 1 (the run KILLED), resumed into the same "
              f"MLflow run (FINISHED): its metrics are stats.json's ({points} points, no step "
              "twice), its params unchanged")


def leaks(secret, out, logdir):
    """The files (the console output, every file of `logdir`) that hold `secret`."""
    found = []
    for path in [out] + [os.path.join(d, n) for d, _, names in os.walk(logdir) for n in names]:
        with open(path, "rb") as f:
            if secret.encode() in f.read():
                found.append(path)
    return found


def scenario_secrets(binary, workdir):
    from mlflow.tracking import MlflowClient
    password, token = "s3cret-Pa55word", "tok-9f8e7d6c5b4a"
    with MLflowServer(workdir) as server:
        logdir = os.path.join(workdir, "secrets")
        out = os.path.join(workdir, "secrets.out")
        uri = server.uri.replace("http://", f"http://alice:{password}@")
        env = job_env(uri)
        env["MLFLOW_TRACKING_TOKEN"] = token
        with open(out, "ab") as f:
            proc = subprocess.Popen([binary] + FLAGS + ["--max-epoch", "2", "--logdir", logdir],
                                    stdout=f, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env)
        finish(proc, out, "the job with credentials")
        run = the_run(MlflowClient(server.uri))
        if run.info.status != "FINISHED":
            fail(f"with credentials the run is {run.info.status}, expected FINISHED", out)
        for secret, what in ((password, "the URI's password"), (token, "the token")):
            if leaks(secret, out, logdir):
                fail(f"{what} appears in {leaks(secret, out, logdir)}", out)
        if "alice" in read(out) and f"alice:{password}" in read(out):
            fail("the URI's user and password are printed", out)
        print("secrets: a URI with a user and password and MLFLOW_TRACKING_TOKEN: the run "
              "FINISHED, and neither secret is in the console, log.log, stats.json or any file "
              "of the log directory")


def serve_forever(make_server):
    """A server of http.server's in a daemon thread; returns it."""
    import threading
    server = make_server()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def scenario_bad_servers(binary, workdir):
    import http.server
    import ssl

    class LoginPage(http.server.BaseHTTPRequestHandler):
        def answer(self):
            body = b"<html><body><h1>Sign in to the proxy</h1><form>...</form></body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PATCH = answer

        def log_message(self, *args):
            pass

    html = serve_forever(lambda: http.server.ThreadingHTTPServer(("127.0.0.1", 0), LoginPage))
    key, cert = os.path.join(workdir, "key.pem"), os.path.join(workdir, "cert.pem")
    made = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                           key, "-out", cert, "-days", "1", "-subj", "/CN=127.0.0.1",
                           "-addext", "subjectAltName=IP:127.0.0.1"],
                          capture_output=True)
    if made.returncode != 0:
        fail(f"openssl could not make a certificate: {made.stderr.decode(errors='replace')}")

    def tls_server():
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), LoginPage)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        return server

    tls = serve_forever(tls_server)
    cases = (("html", f"http://127.0.0.1:{html.server_address[1]}",
              "an HTML page, not MLflow's JSON (a proxy's login page"),
             ("tls", f"https://127.0.0.1:{tls.server_address[1]}",
              "SSL certificate problem: self-signed certificate"),
             # The same server's certificate given as MLflow's client takes it: TLS passes, and
             # what answers is the login page.
             ("tls_ca", f"https://127.0.0.1:{tls.server_address[1]}",
              "an HTML page, not MLflow's JSON"))
    for name, uri, expect in cases:
        env = job_env(uri)
        if name == "tls_ca":
            env["MLFLOW_TRACKING_SERVER_CERT_PATH"] = cert
        logdir = os.path.join(workdir, name)
        out = os.path.join(workdir, f"{name}.out")
        with open(out, "ab") as f:
            proc = subprocess.Popen([binary] + FLAGS + ["--max-epoch", "2", "--logdir", logdir],
                                    stdout=f, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env)
        finish(proc, out, f"the job against the {name} server")
        if not os.path.exists(os.path.join(logdir, "model-8.data")):
            fail(f"against the {name} server the last checkpoint is missing", out)
        text = read(out)
        warned = [line for line in text.splitlines() if "MLflow" in line and
                  ("WRN" in line or "ERR" in line)]
        if not any(expect.lower() in line.lower() for line in warned):
            fail(f"against the {name} server no warning about MLflow mentions "
                 f"{expect!r}: {warned[:5]}", out)
        if name == "tls" and not any("set MLFLOW_TRACKING_SERVER_CERT_PATH to the certificate"
                                     in line and "attempts" not in line for line in warned):
            fail("the refused certificate's warning does not say what to set, or it was retried "
                 f"(a certificate does not change between tries): {warned[:3]}", out)
        # Neither a certificate nor a proxy's page changes by trying again: one warning, then
        # nothing more is sent, and the job's end does not wait for the flush timeout.
        if sum(expect.lower() in line.lower() for line in warned) != 1:
            fail(f"against the {name} server the warning mentioning {expect!r} is not logged "
                 f"exactly once: {warned[:5]}", out)
        if not any("nothing more is sent to mlflow in this run" in line.lower()
                   for line in warned):
            fail(f"against the {name} server the monitor did not give up (it would try again "
                 f"until the flush timeout): {warned[:3]}", out)
        because = ("the server's TLS certificate was refused" if name == "tls"
                   else "the server's answers are not MLflow's")
        if "within the flush timeout" in text or not any(f"({because})" in line
                                                         for line in warned):
            fail(f"against the {name} server the job's end waited for the flush timeout, or its "
                 f"final line does not say why records were dropped ({because})", out)
        print(f"bad_servers ({name}): training unaffected; the log says: {warned[0][:200]}")
    html.shutdown()
    tls.shutdown()
    # What a user of MLflow's Python client may have in MLFLOW_TRACKING_URI: the local file store
    # or the server's own SQL store. Neither is a server: the job refuses before training (a run
    # its user asked to track is not run untracked), naming the fix, and writes no checkpoint.
    for name, uri in (("file", f"file://{workdir}/mlruns"),
                      ("sqlite", f"sqlite:///{workdir}/mlflow.db")):
        logdir = os.path.join(workdir, name)
        out = os.path.join(workdir, f"{name}.out")
        finish(start_job(binary, uri, logdir, 2, out), out, f"the job with a {name} URI", 1)
        text = read(out)
        for expect in (f"'{uri}' is not an http:// or https:// URI",
                       "Start one with `mlflow server --host 127.0.0.1 --port 5000`"):
            if expect not in text:
                fail(f"with MLFLOW_TRACKING_URI={uri} the job does not say {expect!r}", out)
        if os.path.exists(logdir) and any(n.startswith("model-") for n in os.listdir(logdir)):
            fail(f"with MLFLOW_TRACKING_URI={uri} the job trained", out)
        print(f"bad_servers ({name}): MLFLOW_TRACKING_URI={uri}: refused before training, "
              "naming `mlflow server`")


# ---- with --child: a small run (tests/tracking/tracking_child) ----

MAX_DOUBLE = 1.7976931348623157e308  # how MLflow's SQL store keeps an infinity


def start_child(child, uri, logdir, out, *flags):
    os.makedirs(logdir, exist_ok=True)
    with open(out, "ab") as f:
        return subprocess.Popen([child, "--logdir", logdir] + [str(x) for x in flags],
                                stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=job_env(uri))


def as_stored(value):
    """A metric's value as MLflow's SQL store gives it back."""
    if math.isinf(value):
        return MAX_DOUBLE if value > 0 else -MAX_DOUBLE
    return value


def wait_file(path, proc, out, timeout=JOB_TIMEOUT):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if proc.poll() is not None or time.monotonic() > deadline:
            fail(f"{os.path.basename(path)} did not appear (the child ended or hung)", out)
        time.sleep(0.02)


def wait_metric_at(client, step, proc, out, name="progress"):
    """Waits until the run holds metric `name` at `step` (the epoch's delivery arrived)."""
    deadline = time.monotonic() + JOB_TIMEOUT
    while time.monotonic() < deadline and proc.poll() is None:
        experiment = client.get_experiment_by_name(EXPERIMENT)
        runs = client.search_runs([experiment.experiment_id]) if experiment else []
        if runs and name in runs[0].data.metrics and any(
                m.step == step for m in client.get_metric_history(runs[0].info.run_id, name)):
            return runs[0]
        time.sleep(0.05)
    fail(f"metric {name} at step {step} never reached the server", out)


def check_stored_metrics(client, run, expected, out):
    """The run's metrics are `expected` ({name as sent: [(step, value)]}), as MLflow stores the
    values, each step once. Returns the number of points."""
    names = set(run.data.metrics)
    if names != set(expected):
        fail(f"the run's metrics differ from what was put: missing {sorted(set(expected) - names)[:10]}"
             f", unexpected {sorted(names - set(expected))[:10]}", out)
    for name, points in expected.items():
        history = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, name))
        want = sorted((step, as_stored(v)) for step, v in points)
        if len(history) != len({s for s, _ in history}):
            fail(f"metric {name}: a step logged twice: {history}", out)
        if len(history) != len(want) or not all(
                s == t and same_value(v, w) for (s, v), (t, w) in zip(history, want)):
            fail(f"metric {name}: the server holds {history}, the job put {want}", out)
    return sum(len(p) for p in expected.values())


def refused(uri, endpoint, body):
    """Posts `body` to the REST API; (HTTP status, MLflow's error message)."""
    import urllib.error
    request = urllib.request.Request(f"{uri}/api/2.0/mlflow/{endpoint}",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, ""
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}").get("message", "")


def scenario_limits(child, workdir):
    from mlflow.tracking import MlflowClient
    with MLflowServer(workdir) as server:
        client = MlflowClient(server.uri)
        logdir = os.path.join(workdir, "limits")
        out = os.path.join(workdir, "limits.out")
        finish(start_child(child, server.uri, logdir, out, "--epochs", 2, "--odd-values",
                           "--many-metrics", 1500, "--long-param", 7000), out, "the child")
        run = the_run(client)
        if run.info.status != "FINISHED":
            fail(f"the run is {run.info.status}, expected FINISHED", out)
        expected = stats_points(logdir)
        for name in ("val_loss", "a/b", "__/up", "caf_", "k" * 250, "odd/nan", "odd/inf",
                     "many/1499"):
            if name not in expected:
                fail(f"stats.json has no statistic that the monitor sends as {name!r}", out)
        points = check_stored_metrics(client, run, expected, out)
        steps = {step for pts in expected.values() for step, _ in pts}
        per_step = min(sum(1 for pts in expected.values() if any(s == t for s, _ in pts))
                       for t in steps)
        if per_step <= 1000:
            fail(f"only {per_step} metrics in a step: the test needs more than MLflow's 1000 per "
                 "request", out)
        params = run.data.params
        long_value = "0123456789" * 600
        if params.get("long_param") != long_value or params.get("short_param") != "kept":
            fail(f"params: long_param holds {len(params.get('long_param', ''))} bytes (expected "
                 f"its first 6000), short_param {params.get('short_param')!r}", out)
        if "the value of 'long_param' is 7000 bytes long; MLflow keeps at most 6000" not in read(out):
            fail("no warning that long_param was cut", out)
        # The same values sent as they are: the server refuses each request whole.
        direct = client.create_run(run.info.experiment_id).info.run_id
        now = int(time.time() * 1000)
        # A param over 6000 characters: MLflow 3 cuts it (MLFLOW_TRUNCATE_LONG_VALUES, on by
        # default); older servers, and one started with it false, refuse the request whole.
        status, message = refused(server.uri, "runs/log-batch", {"run_id": direct, "params": [
            {"key": "long_param", "value": "0123456789" * 700}]})
        kept = client.get_run(direct).data.params.get("long_param", "")
        if status != 200 or kept != long_value:
            fail(f"a 7000-byte param sent as it is: HTTP {status} ({message}), {len(kept)} bytes "
                 "kept; expected 200 and its first 6000 (MLFLOW_TRUNCATE_LONG_VALUES)")
        cases = (
            ("1001 metrics in one request", {"run_id": direct, "metrics": [
                {"key": f"many/{i:04d}", "value": i, "timestamp": now, "step": 0}
                for i in range(1001)]}),
            ("the name 'a//b'", {"run_id": direct, "metrics": [
                {"key": "a//b", "value": 1.5, "timestamp": now, "step": 0}]}),
            ("the name '../up'", {"run_id": direct, "metrics": [
                {"key": "../up", "value": 1.5, "timestamp": now, "step": 0}]}),
            ("a 300-byte name", {"run_id": direct, "metrics": [
                {"key": "k" * 300, "value": 1.5, "timestamp": now, "step": 0}]}))
        answers = []
        for what, body in cases:
            status, message = refused(server.uri, "runs/log-batch", body)
            if status != 400:
                fail(f"MLflow's server answered {status} to {what}, expected 400 ({message})")
            answers.append(f"{what}: 400")
        print(f"limits: MLflow {mlflow_version()} holds {len(expected)} metrics ({points} points, "
              f"{per_step} or more in a step, each step once; NaN as NaN, +-inf as +-{MAX_DOUBLE}, "
              "the refused names renamed), long_param cut to 6000 bytes with a warning; sent as "
              f"they are, the server refuses {'; '.join(answers)}, and cuts a 7000-byte param "
              "to 6000 itself")


def unsent_count(text):
    """The count in the monitor's final line: `..., N records were not sent within the flush
    timeout`."""
    import re
    found = re.findall(r"(\d+) records were not sent within the flush timeout", text)
    return int(found[-1]) if found else None


def scenario_server_stopped(child, workdir):
    from mlflow.tracking import MlflowClient
    with MLflowServer(workdir) as server:
        client = MlflowClient(server.uri)
        logdir = os.path.join(workdir, "stopped")
        out = os.path.join(workdir, "stopped.out")
        flush_ms = 4000
        proc = start_child(child, server.uri, logdir, out, "--epochs", 4, "--pause-after-epoch", 1,
                           "--odd-values", "--flush-timeout-ms", flush_ms, "--max-attempts", 2,
                           "--backoff-ms", 200)
        wait_file(os.path.join(logdir, "paused-1"), proc, out)
        wait_metric_at(client, 3, proc, out)
        server.stop()
        open(os.path.join(logdir, "resume-1"), "w").close()
        resumed = time.monotonic()
        finish(proc, out, "the child, its server stopped")
        took = time.monotonic() - resumed
        text = read(out)
        stats = json.loads(read(os.path.join(logdir, "stats.json")))
        if [e["epoch_num"] for e in stats] != [1, 2, 3, 4]:
            fail(f"stats.json's epochs are {[e['epoch_num'] for e in stats]}, expected 1..4", out)
        later = sum(1 for e in stats if e["epoch_num"] >= 2 for k, v in e.items()
                    if k not in ("global_step", "epoch_num") and isinstance(v, (int, float)))
        count = unsent_count(text)
        if count != later:
            fail(f"the log counts {count} records not sent; epochs 2-4 put {later}", out)
        if "and the run's end (FINISHED) was not sent" not in text:
            fail("the log does not say that the run's end was not sent", out)
        if "not sent (the server did not answer); " not in text:
            fail("the log does not say that records were held back", out)
        if took > flush_ms / 1000 + 15:
            fail(f"the child took {took:.1f} s after its server stopped, its flush timeout is "
                 f"{flush_ms / 1000} s", out)
        server.start()
        run = the_run(client)
        if run.info.status != "RUNNING":
            fail(f"the run is {run.info.status}; its end was never sent: expected RUNNING", out)
        steps = {m.step for m in client.get_metric_history(run.info.run_id, "progress")}
        if steps != {3}:
            fail(f"the server holds progress at steps {sorted(steps)}, expected only 3 (epoch 1)", out)
        print(f"server_stopped: training went on to the end (4 epochs in stats.json); the child "
              f"ended {took:.1f} s after its server stopped (flush timeout {flush_ms / 1000} s), "
              f"its log counting the {later} records of epochs 2-4 as not sent and the run's end "
              "as not sent; the run RUNNING with epoch 1's metrics")


def scenario_server_restarted(child, workdir):
    from mlflow.tracking import MlflowClient
    with MLflowServer(workdir) as server:
        client = MlflowClient(server.uri)
        logdir = os.path.join(workdir, "restarted")
        out = os.path.join(workdir, "restarted.out")
        proc = start_child(child, server.uri, logdir, out, "--epochs", 4, "--pause-after-epoch", 1,
                           "--pause-after-epoch", 2, "--odd-values", "--max-attempts", 2, "--backoff-ms", 200)
        wait_file(os.path.join(logdir, "paused-1"), proc, out)
        wait_metric_at(client, 3, proc, out)
        server.stop()
        open(os.path.join(logdir, "resume-1"), "w").close()
        wait_file(os.path.join(logdir, "paused-2"), proc, out)
        deadline = time.monotonic() + 60
        while "kept and sent again when it answers" not in read(out):
            if time.monotonic() > deadline:
                fail("epoch 2's failed delivery was not logged within 60 s", out)
            time.sleep(0.05)
        server.restart()
        open(os.path.join(logdir, "resume-2"), "w").close()
        finish(proc, out, "the child, its server restarted")
        run = the_run(client)
        if run.info.status != "FINISHED":
            fail(f"the run is {run.info.status}, expected FINISHED", out)
        points = check_stored_metrics(client, run, stats_points(logdir), out)
        text = read(out)
        arrived = [line for line in text.splitlines() if "the server answers again" in line]
        if not arrived:
            fail("the log does not say that the records held back were sent", out)
        print(f"server_restarted: the server stopped after epoch 1 and started again after epoch "
              f"2's delivery failed; the run FINISHED with every metric of stats.json ({points} "
              f"points, each step once); the log: {arrived[0].split('] ', 1)[-1]}")

def mlflow_version():
    import mlflow
    return mlflow.__version__


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", help="the main job (fashion_mnist): run, resume, secrets, "
                   "bad_servers")
    p.add_argument("--child", help="trainpack_tracking_child: limits, server_stopped, "
                   "server_restarted")
    p.add_argument("--workdir", required=True)
    p.add_argument("scenario", choices=["run", "resume", "secrets", "bad_servers", "limits",
                                        "server_stopped", "server_restarted"])
    args = p.parse_args()
    try:
        import mlflow  # noqa: F401
    except ImportError:
        use_venv("MLflow")
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    with_job = {"run": scenario_run, "resume": scenario_resume, "secrets": scenario_secrets,
                "bad_servers": scenario_bad_servers}
    with_child = {"limits": scenario_limits, "server_stopped": scenario_server_stopped,
                  "server_restarted": scenario_server_restarted}
    program = args.binary if args.scenario in with_job else args.child
    if not program:
        p.error(f"{args.scenario} needs {'--binary' if args.scenario in with_job else '--child'}")
    {**with_job, **with_child}[args.scenario](os.path.abspath(program), args.workdir)


def fail(message, *outputs):
    tracking_support.fail("mlflow_server_test.py", message, *outputs)


if __name__ == "__main__":
    main()
