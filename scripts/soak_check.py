#!/usr/bin/env python3
"""Over-admission checker of scripts/soak.sh: one sequential client per (server, key) on the
HTTP `/json` endpoint, counting the OK answers per window against the limit.

Each request is decided by the server at some instant in [sent, received] (the client waits for
each answer before the next request, and server, Redis and client share the host's clock). For
a fixed window of W starting on the Unix epoch, an OK answer whose [sent, received] lies in one
window is certainly counted in it; one that straddles a boundary is ambiguous. A window whose
certain OKs exceed the limit is a certain over-admission; counting the ambiguous ones in both
neighbours gives the possible ones. For a sliding-window log, L + 1 OK answers whose decisions
all lie within less than W of each other, i.e. received(last) - sent(first) < W, are a certain
over-admission; sent(last) - received(first) < W, a possible one.

Prints one JSON object per checked key on exit (SIGTERM or after --seconds).
"""

import argparse
import http.client
import json
import math
import signal
import sys
import threading
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", action="append", required=True,
                        help="NAME=HOST:PORT of a server's HTTP port (repeatable)")
    parser.add_argument("--check", action="append", required=True,
                        help="ALGORITHM:KEY:LIMIT:WINDOW_SECONDS of a rule of domain `soak`")
    parser.add_argument("--seconds", type=float, required=True)
    args = parser.parse_args()

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    deadline = time.time() + args.seconds
    threads, results = [], []
    for target in args.target:
        name, address = target.split("=", 1)
        host, port = address.rsplit(":", 1)
        for check in args.check:
            algorithm, key, limit, window = check.split(":")
            result = {"server": name, "algorithm": algorithm, "key": key,
                      "limit": int(limit), "window_s": float(window)}
            results.append(result)
            thread = threading.Thread(
                target=run, args=(host, int(port), result, stop, deadline), daemon=True)
            thread.start()
            threads.append(thread)
    for thread in threads:
        thread.join()
    for result in results:
        result.pop("answers", None)
        print(json.dumps(result, sort_keys=True))


def run(host, port, result, stop, deadline):
    body = json.dumps({
        "domain": "soak",
        "descriptors": [{"entries": [{"key": result["key"], "value": "checked"}]}],
    }).encode()
    answers = []  # (sent, received) of every OK answer
    counts = {"requests": 0, "ok": 0, "over_limit": 0, "errors": 0, "reconnects": 0}
    errors = {}
    connection = None
    while not stop.is_set() and time.time() < deadline:
        try:
            if connection is None:
                connection = http.client.HTTPConnection(host, port, timeout=5)
            sent = time.time()
            connection.request("POST", "/json", body, {"content-type": "application/json"})
            response = connection.getresponse()
            payload = response.read()
            received = time.time()
            counts["requests"] += 1
            # /json answers OVER_LIMIT with 429 and the same body.
            if response.status not in (200, 429):
                counts["errors"] += 1
                kind = f"http {response.status}"
                errors[kind] = errors.get(kind, 0) + 1
                time.sleep(0.01)
                continue
            code = json.loads(payload).get("overallCode")
            if code == "OK":
                counts["ok"] += 1
                answers.append((sent, received))
            elif code == "OVER_LIMIT":
                counts["over_limit"] += 1
            else:
                counts["errors"] += 1
                errors[f"code {code}"] = errors.get(f"code {code}", 0) + 1
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            # The server closes kept-alive connections after --http-connection-timeout (60 s):
            # the request was not answered; reconnect and go on.
            counts["reconnects"] += 1
            if connection is not None:
                connection.close()
            connection = None
        except (OSError, http.client.HTTPException, ValueError) as error:
            counts["errors"] += 1
            kind = type(error).__name__
            errors[kind] = errors.get(kind, 0) + 1
            if connection is not None:
                connection.close()
            connection = None
            time.sleep(0.05)
    result.update(counts)
    result["error_kinds"] = errors
    if result["algorithm"] == "fixed_window":
        result.update(fixed_window(answers, result["limit"], result["window_s"]))
    else:
        result.update(sliding_log(answers, result["limit"], result["window_s"]))


def fixed_window(answers, limit, window):
    certain, ambiguous = {}, {}
    for sent, received in answers:
        first, last = math.floor(sent / window), math.floor(received / window)
        if first == last:
            certain[first] = certain.get(first, 0) + 1
        else:
            for w in (first, last):
                ambiguous[w] = ambiguous.get(w, 0) + 1
    windows = set(certain) | set(ambiguous)
    over_certain = sum(1 for w in windows if certain.get(w, 0) > limit)
    over_possible = sum(1 for w in windows if certain.get(w, 0) + ambiguous.get(w, 0) > limit)
    full = sum(1 for w in windows if certain.get(w, 0) + ambiguous.get(w, 0) >= limit)
    return {
        "windows": len(windows),
        "windows_at_limit": full,
        "max_ok_per_window": max((certain.get(w, 0) for w in windows), default=0),
        "ambiguous_ok": sum(ambiguous.values()) // 2,
        "over_admitted_windows_certain": over_certain,
        "over_admitted_windows_possible": over_possible,
    }


def sliding_log(answers, limit, window):
    certain = possible = 0
    for i in range(len(answers) - limit):
        first, last = answers[i], answers[i + limit]
        if last[1] - first[0] < window:
            certain += 1
        if last[0] - first[1] < window:
            possible += 1
    return {
        "over_admitted_runs_certain": certain,
        "over_admitted_runs_possible": possible,
    }


if __name__ == "__main__":
    sys.exit(main())
