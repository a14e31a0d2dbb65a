"""The fleet the fleet tests read: three gputui hosts and one dcgm-exporter host.

* gpu-node-01: GPU 0 at 95 % held by container ``train-llm`` (alice, python3), which is
  granted GPU 0 and has an ``unpinned`` finding; imbalance flagged; a temperature alert.
* gpu-node-02: four idle GPUs, a host process (bob's jupyter) on GPU 3. The tests stop it.
* gpu-node-03: GPU 0 at 40 %; GPU 1 granted to container ``serve``.
* dcgm-node-01: the recorded dcgm-exporter page: GPU 0 at 97 %, GPU 1 idle and empty.
"""

from __future__ import annotations

from tests.fleet_exposition import GIB, Card, Host, Proc

NODE1 = Host("gpu-node-01", [
    Card(0, "GPU-1a000000-0000-4000-8000-000000000000", 0.95, 62 * GIB, temp=84,
         procs=[Proc(4242, "alice", "python3", 60 * GIB, "train-llm", "pytorch/pytorch:2.4")]),
    Card(1, "GPU-1a000000-0000-4000-8000-000000000001", 0.0, 1 * GIB, temp=35),
], grants=[("train-llm", "GPU-1a000000-0000-4000-8000-000000000000", 0)], findings=[("train-llm", "unpinned")],
    imbalance=True, alerts=[("0", "temperature", "warning")])

NODE2 = Host("gpu-node-02", [
    Card(i, f"GPU-2b000000-0000-4000-8000-00000000000{i}", 0.0, 1 * GIB, temp=30 + i) for i in range(4)])
NODE2.cards[3].procs.append(Proc(777, "bob", "jupyter", 5 * GIB))
NODE2.cards[3].used = 6 * GIB

NODE3 = Host("gpu-node-03", [
    Card(0, "GPU-3c000000-0000-4000-8000-000000000000", 0.40, 20 * GIB, temp=60,
         procs=[Proc(9001, "carol", "vllm", 19 * GIB, "serve", "vllm/vllm-openai")]),
    Card(1, "GPU-3c000000-0000-4000-8000-000000000001", 0.10, 2 * GIB, temp=41),
], grants=[("serve", "GPU-3c000000-0000-4000-8000-000000000001", 1)])

HOSTS = (NODE1, NODE2, NODE3)
