"""The timing both PyTorch references use (pytorch_lenet.py, pytorch_resnet.py): untimed
warm-up steps, then `repeats` timed runs of `steps` training steps, the clock read once
the device has finished (`sync`). Returns samples/s of each run."""
import time


def training_rates(step, sync, warmup, steps, repeats, batch):
    for _ in range(warmup):
        step()
    sync()
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        rates.append(steps * batch / (time.perf_counter() - t0))
    return rates
