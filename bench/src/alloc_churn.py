"""An allocation-heavy Python workload for bench/memray_overhead.sh: dicts,
lists, strings and JSON round trips, most of it freed at once, a little kept
(as a service's caches keep it). ROUNDS (argv[1]) sets the length."""
import json
import sys

kept = []


def request(i):
    body = {"id": i, "tags": ["t%d" % j for j in range(20)], "payload": "x" * (i % 500)}
    text = json.dumps(body)
    back = json.loads(text)
    words = text.split(",")
    if i % 100 == 0:
        kept.append(back)  # the cache: one in a hundred stays
    return len(words)


def main(rounds):
    total = 0
    for r in range(rounds):
        for i in range(5000):
            total += request(r * 5000 + i)
    print(total, len(kept))


if __name__ == "__main__":
    main(int(sys.argv[1]))
