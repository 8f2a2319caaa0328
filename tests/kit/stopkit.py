"""What the tests of stopping a run share (tests/tools/test_faults.py, test_signals.py; not a
test itself):
- tiny_run(tmp): the flags of a tiny-gpt2 run on 6000 token ids it writes under tmp;
- train(redco, base, *args): `redco train` run to its end, a failed check when it exits non-zero;
- children(pid): the processes pid started;
- read_to_step(p, step): stderr of a started run up to its progress line of `step`;
  end_of(p, lines, what): the run waited for (killed, a failed check, after 60 s) and all
  its stderr;
- same_weights(a, b, what): the final weights of two workdirs equal bitwise;
- check_stop(workdir, code, err, what): the exit status, the one "stopped by" line, no page from
  mpiexec, and the checkpoint it names: complete and loadable.
"""
import os
import signal
import subprocess

import numpy as np
from safetensors.numpy import load_file

from refkit import MPI_ENV, check


def tiny_run(tmp):
    data = os.path.join(tmp, "ids.npy")
    rng = np.random.default_rng(0)
    np.save(data, (np.cumsum(rng.integers(1, 4, size=6000)) % 250).astype(np.int32))
    return ["--model", "tiny-gpt2", "--data", data, "--seq-len", "16", "--log-every", "1"]


def train(redco, base, *args, env=None, timeout=120):
    r = subprocess.run([redco, "train", *base, *args], capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, **MPI_ENV, **(env or {})})
    check(r.returncode == 0, f"train {' '.join(args)} exited {r.returncode}:\n{r.stderr[-2000:]}")
    return r


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def read_to_step(p, step):
    lines = []
    for line in p.stderr:
        lines.append(line)
        if line.startswith(f"step {step}/"):
            break
    return lines


def end_of(p, lines, what):
    try:
        _, rest = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        _, rest = p.communicate()
        check(False, f"{what}: still running 60 s after the signals")
    return "".join(lines) + rest


def same_weights(a, b, what):
    wa, wb = (load_file(os.path.join(d, "final", "model.safetensors")) for d in (a, b))
    check(wa.keys() == wb.keys() and all(np.array_equal(wa[k], wb[k]) for k in wa), what)


def check_stop(workdir, code, err, what, want=None, sig="SIGTERM"):
    """want: the exit status (None: 128 + the signal's number, as the launcher and one process
    end)"""
    want = 128 + getattr(signal, sig) if want is None else want
    check(code == want, f"{what}: exit status {code} ({want} expected):\n{err[-1500:]}")
    page = [ln for ln in err.splitlines() if "mpiexec" in ln or "mpirun" in ln or ln.startswith("---")]
    check(not page, f"{what}: no page from mpiexec after a stop:\n{err[-1500:]}")
    line = [ln for ln in err.splitlines() if f"stopped by {sig} at step" in ln]
    check(len(line) == 1, f"{what}: one 'stopped by' line in:\n{err[-1500:]}")
    if not line:
        return
    step = line[0].split("at step ")[1].split(";")[0]
    ck = f"checkpoint-{step}"
    check(line[0].endswith(f"checkpoint written to {os.path.join(workdir, ck)}"), f"{what}: {line[0]}")
    with open(os.path.join(workdir, "last_checkpoint")) as f:
        check(f.read().strip() == ck, f"{what}: last_checkpoint names {ck}")
    for name in ("model.safetensors", "trainer_state.json"):
        check(os.path.exists(os.path.join(workdir, ck, name)), f"{what}: {ck}/{name} written")
    try:
        weights = load_file(os.path.join(workdir, ck, "model.safetensors"))
        check(len(weights) > 0, f"{what}: {ck}/model.safetensors holds tensors")
    except Exception as e:  # noqa: BLE001 - any failure to load is the finding
        check(False, f"{what}: {ck}/model.safetensors does not load: {e}")
    check(not os.path.exists(os.path.join(workdir, "final")), f"{what}: no final/ after a stop")
