"""One `detattn bench ... --json` run, read the same way by every script that times the binary
(scripts/gpu_compare.py, scripts/ab_bench.py)."""
import json
import subprocess


def bench_json(binary, args, env=None, timeout=None):
    """Run `binary bench ARGS --json`; return (its JSON document, None), or (None, what went wrong:
    the CLI's typed error message, else the last line it printed, a timeout, unreadable output)."""
    cmd = [binary, "bench", *args, "--json"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timeout after {timeout:.0f} s"
    if p.returncode != 0:
        try:  # with --json the CLI reports its typed error as JSON on stdout
            return None, json.loads(p.stdout)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            said = (p.stderr.strip() or p.stdout.strip()).splitlines()
            return None, f"exit {p.returncode}: " + (said or [""])[-1][:240]
    try:
        j = json.loads(p.stdout)
        float(j["median_us"])
        return j, None
    except (ValueError, KeyError, TypeError) as e:
        return None, f"unreadable output: {e}"
