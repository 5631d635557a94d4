"""Check 6: a small-MLP training loop (forward, backward, Adam step), timed
after a warm-up; one synchronize every 10 steps, as a loop that logs would.
With --profile, afterwards 50 steps under torch.profiler: the host time of
each CUDA runtime and driver call (what the shim's hooks add shows there)."""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _proto import emit  # noqa: E402

import torch  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--profile", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 10)).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(256, 512, device="cuda")
    y = torch.randint(0, 10, (256,), device="cuda")
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(30):
        step()
    torch.cuda.synchronize()
    emit("ready", pid=os.getpid())
    steps = 0
    start = time.monotonic()
    while True:
        for _ in range(10):
            loss = step()
        steps += 10
        loss.item()  # synchronizes
        elapsed = time.monotonic() - start
        if elapsed >= args.seconds:
            break
    emit("done", steps=steps, seconds=elapsed, ms_per_step=elapsed * 1000.0 / steps)
    if args.profile:
        emit("profile", calls=profile_calls(step))


def profile_calls(step):
    """Per CUDA API call (runtime `cuda*`, driver `cu*`) over 50 steps: count
    and mean host microseconds, the most costly in total first."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            for _ in range(10):
                loss = step()
            loss.item()
    calls = [{"name": e.key, "count": e.count, "mean_us": e.cpu_time_total / e.count}
             for e in prof.key_averages() if e.key.startswith("cu") and e.count > 0]
    calls.sort(key=lambda c: -c["count"] * c["mean_us"])
    return calls[:20]


if __name__ == "__main__":
    main()
