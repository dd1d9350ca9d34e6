# What the Python benchmarks of bench/ share: starting servers on a free port
# of 127.0.0.1, waiting until they are ready, plain HTTP requests with a
# timeout, and stopping every server they started (call stop_all on exit).
import http.client, json, socket, subprocess, sys, tempfile, time

procs = []


def stop_all():
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    procs.clear()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def request(port, method, path, body, timeout_s):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        c.request(method, path, json.dumps(body) if body is not None else None,
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def start(name, argv, port, ready=lambda status, raw: status == 200, timeout_s=300):
    """Starts argv (its output in a temporary log file) and waits until
    GET /health on port satisfies ready(status, body); exits with the log's
    name when the process dies or timeout_s passes."""
    log = tempfile.NamedTemporaryFile(prefix=f"bench-{name}-", suffix=".log", delete=False)
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    procs.append(p)
    t0 = time.time()
    while time.time() - t0 < timeout_s:
        if p.poll() is not None:
            sys.exit(f"{name} exited ({p.returncode}); log: {log.name}")
        try:
            st, raw = request(port, "GET", "/health", None, 5)
            if ready(st, raw):
                return p
        except (OSError, ValueError):
            pass
        time.sleep(0.3)
    sys.exit(f"{name} not ready in {timeout_s} s; log: {log.name}")
