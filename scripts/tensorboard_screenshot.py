"""The picture of what a user sees: TensorBoard's scalars dashboard on a main-job run, showing the
validation error curves, taken by headless Chromium. docs/images/tensorboard-scalars.png is made by

    bash scripts/tracking_venv.sh                # TensorBoard, from PyPI
    apt-get install chromium                     # Debian's
    python3 scripts/tensorboard_screenshot.py --binary build/examples/fashion_mnist/fashion_mnist \\
        --out docs/images/tensorboard-scalars.png

It trains the main job (12 short epochs, a few seconds) into a temporary directory, or takes
--logdir, serves it with `tensorboard --logdir` on 127.0.0.1, opens the scalars dashboard filtered
to `val-error` in Chromium driven over its DevTools protocol, waits until the page (its shadow
DOM included) names both val-error-top1 and val-error-top5, and writes the screenshot. It fails
when the tags do not appear. Runs itself again with the venv's Python when started by another
(TensorBoard and aiohttp, for the DevTools websocket, come with the venv). Exit status 77 when
TensorBoard's venv or Chromium is missing (saying which).
"""

import argparse
import asyncio
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIP = 77
TAGS = ("val-error-top1", "val-error-top5")
PAGE = "/#scalars&tagFilter=val-error&_smoothingWeight=0"
WAIT = 60
# Every text of the page, through its open shadow roots (TensorBoard's Polymer components).
DEEP_TEXT = """(() => {
  const out = [];
  const walk = (node) => {
    if (node.shadowRoot) walk(node.shadowRoot);
    for (const child of node.children || []) walk(child);
    if (node.nodeType === 1 && node.children.length === 0 && node.textContent)
      out.push(node.textContent.trim());
  };
  walk(document.documentElement);
  return out.join('\\n');
})()"""


def die(message, status=1):
    print(f"tensorboard_screenshot.py: {message}", file=sys.stderr)
    sys.exit(status)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, proc, what, log):
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            die(f"{what} exited with {proc.returncode} (its output: {log})")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.read()
        except OSError:
            time.sleep(0.25)
    die(f"{what} did not answer {url} within {WAIT} s (its output: {log})")


def stop(proc):
    if proc is not None and proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


async def capture(devtools_port, url, out, width, height):
    """Opens `url` in the browser's page, waits for the tags, writes the screenshot to `out`."""
    import aiohttp
    targets = json.loads(urllib.request.urlopen(
        f"http://127.0.0.1:{devtools_port}/json", timeout=10).read())
    page = next(t for t in targets if t.get("type") == "page")
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            counter = 0

            async def call(method, **params):
                nonlocal counter
                counter += 1
                await ws.send_json({"id": counter, "method": method, "params": params})
                while True:
                    message = await ws.receive_json()
                    if message.get("id") == counter:
                        if "error" in message:
                            die(f"DevTools {method}: {message['error']}")
                        return message["result"]

            await call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                       deviceScaleFactor=1, mobile=False)
            await call("Page.navigate", url=url)
            deadline = time.monotonic() + WAIT
            text = ""
            while time.monotonic() < deadline:
                result = await call("Runtime.evaluate", expression=DEEP_TEXT, returnByValue=True)
                text = result.get("result", {}).get("value") or ""
                if all(tag in text.split("\n") for tag in TAGS):
                    break
                await asyncio.sleep(0.5)
            else:
                die(f"the page did not name {', '.join(TAGS)} within {WAIT} s; its text begins: "
                    f"{text[:300]!r}")
            await asyncio.sleep(2)  # the charts' last drawing
            shot = await call("Page.captureScreenshot", format="png")
            with open(out, "wb") as f:
                f.write(base64.b64decode(shot["data"]))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", help="the main job (fashion_mnist), trained into a temporary "
                   "directory unless --logdir is given")
    p.add_argument("--logdir", help="a log directory of the main job to show instead")
    p.add_argument("--out", required=True, help="the PNG to write")
    p.add_argument("--chromium", default="/usr/bin/chromium")
    p.add_argument("--width", type=int, default=1400)
    p.add_argument("--height", type=int, default=900)
    args = p.parse_args()
    if not args.binary and not args.logdir:
        die("give --binary (the main job, to train a run to show) or --logdir", 2)
    try:
        import aiohttp  # noqa: F401
        import tensorboard  # noqa: F401
    except ImportError:
        found = subprocess.run(["bash", os.path.join(ROOT, "scripts", "tracking_venv.sh"),
                                "--python"], capture_output=True, text=True)
        venv_python = found.stdout.strip()
        if found.returncode == 0 and venv_python and venv_python != sys.executable:
            os.execv(venv_python, [venv_python] + sys.argv)
        die("SKIPPED: TensorBoard's venv is missing: make it with `bash scripts/tracking_venv.sh`",
            SKIP)
    if not os.access(args.chromium, os.X_OK):
        die(f"SKIPPED: {args.chromium} is missing (Debian: apt-get install chromium)", SKIP)

    work = tempfile.mkdtemp(prefix="tensorboard_screenshot.")
    board = browser = None
    try:
        logdir = args.logdir
        if not logdir:
            logdir = os.path.join(work, "train_log", "fashion_mnist")
            env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
            job = subprocess.run(
                [os.path.abspath(args.binary), "--train-limit", "2048", "--val-limit", "512",
                 "--batch-size", "64", "--threads", "1", "--max-epoch", "12",
                 "--max-val-error", "1", "--logdir", logdir],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=600)
            if job.returncode != 0:
                die(f"the main job exited with {job.returncode}:\n"
                    f"{job.stdout.decode(errors='replace')[-3000:]}")
        board_port = free_port()
        board_log = os.path.join(work, "tensorboard.log")
        with open(board_log, "wb") as f:
            board = subprocess.Popen(
                [os.path.join(os.path.dirname(sys.executable), "tensorboard"), "--logdir",
                 os.path.dirname(os.path.abspath(logdir)), "--host", "127.0.0.1", "--port",
                 str(board_port), "--load_fast", "false"],
                stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        wait_http(f"http://127.0.0.1:{board_port}/data/runs", board, "tensorboard", board_log)
        devtools_port = free_port()
        browser_log = os.path.join(work, "chromium.log")
        with open(browser_log, "wb") as f:
            browser = subprocess.Popen(
                [args.chromium, "--headless", "--no-sandbox", "--disable-gpu",
                 "--hide-scrollbars", f"--remote-debugging-port={devtools_port}",
                 f"--user-data-dir={os.path.join(work, 'chromium-profile')}",
                 f"--window-size={args.width},{args.height}", "about:blank"],
                stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        wait_http(f"http://127.0.0.1:{devtools_port}/json/version", browser, "chromium",
                  browser_log)
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        asyncio.run(capture(devtools_port, f"http://127.0.0.1:{board_port}{PAGE}", args.out,
                            args.width, args.height))
        print(f"tensorboard_screenshot.py: {args.out}: TensorBoard's scalars dashboard on "
              f"{logdir}, naming {', '.join(TAGS)}")
    finally:
        stop(browser)
        stop(board)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
