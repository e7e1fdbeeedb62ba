"""A stateful batch worker (a Ray actor, a Geneva UDF, a multiprocessing
pool worker) with the four leak patterns of memray's users, one per method,
beside a bounded cache and temporary work that are not leaks.

    memprofile exec --backend memray --output-dir OUT -- python3 udf.py BATCHES
    memprofile report OUT

Each kept object is made on its own line, so the report can tell them
apart: memray names where memory was allocated, and what keeps it alive is
the object that holds it (see docs/python.md, "Four leak patterns").
"""
import functools
import sys
import time


class Loss:
    """What a training step returns: like a tensor with its graph, it holds
    the activations it was computed from."""

    def __init__(self, activations):
        self.activations = activations
        self.value = len(activations) % 7


@functools.lru_cache(maxsize=8)
def tokenizer(vocab):
    return bytearray(32 * 1024)  # bounded: at most 8 kept, not a leak


class Udf:
    def __init__(self):
        # The cache is warmed at start, as a worker loads its vocabularies:
        # full before the first batch, it then only replaces entries.
        for vocab in range(8):
            tokenizer(vocab)
        self.seen = {}
        self.batches = []
        self.callbacks = []
        self.losses = []

    # 1. A growing cache: a dict keyed by every row ever seen.
    def embed(self, batch, rows):
        for row in range(rows):
            self.seen[(batch, row)] = bytearray(8 * 1024)  # pattern 1: unbounded cache

    # 2. Accumulating buffers: each batch's buffer kept "for later".
    def buffer(self, batch):
        self.batches.append(bytearray(96 * 1024))  # pattern 2: retained per-batch buffer

    # 3. A closure capture: a callback that only needs the length keeps the
    # whole buffer alive.
    def make_buffer(self):
        return bytearray(128 * 1024)  # pattern 3: the buffer a closure captures

    def register(self):
        data = self.make_buffer()
        self.callbacks.append(lambda: len(data))

    # 4. Retention through a result: keeping the loss (not loss.value) keeps
    # the activations it was computed from, as a tensor keeps its graph.
    def forward(self):
        activations = bytearray(160 * 1024)  # pattern 4: activations a kept result holds
        return Loss(activations)

    def train(self):
        self.losses.append(self.forward())

    def transform(self, batch):
        scratch = bytearray(1024 * 1024)  # temporary: freed when the batch ends
        tokenizer(batch % 32)
        self.embed(batch, 8)
        self.buffer(batch)
        self.register()
        self.train()
        return len(scratch)


def main(batches, pause):
    udf = Udf()
    for batch in range(batches):
        udf.transform(batch)
        time.sleep(pause)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 60, float(sys.argv[2]) if len(sys.argv) > 2 else 0.02)
