"""Learning-rate schedules against transformers' get_wsd_schedule: for every update k of a run
(metrics.jsonl's step k + 1) the logged learning rate equals train.lr times the factor a LambdaLR
from get_wsd_schedule(opt, warmup, decay, steps, decay_type, min_lr_ratio = min_lr / lr) gives
at k, warmup included (wsd in its three decay shapes; linear and constant as its special cases).
Then WSD's point: a run resumed from a stable-phase checkpoint with a longer or a shorter
train.steps decays at its new end, its learning rates those of a fresh run of that length."""
import json
import os
import shutil
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from oracle_support import require, run, temp_dir, tool  # noqa: E402

torch, optimization = require("torch", "transformers.optimization")

LR, MIN_LR, WARMUP = 3.0e-3, 3.0e-4, 3
STEPS, DECAY = 24, 8


def write_tokens(path, count, vocab):
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{count}H", *[(i * 7919) % vocab for i in range(count)]))


def tiny_config(d):
    write_tokens(f"{d}/train.bin", 8000, 72)
    path = f"{d}/tiny.yaml"
    with open(path, "w") as f:
        f.write("mesh: {shape: [1], axes: [data]}\n"
                "sharding_rules: [[batch, data], [vocab, null], [heads, null], [mlp, null], "
                "[embed, null], [seq, null], [kv, null]]\n"
                "model: {vocab_size: 72, block_size: 16, n_layer: 1, n_head: 2, n_embd: 16, dropout: 0.0}\n"
                f"data: {{train: {d}/train.bin, batch_size: 4}}\n"
                f"train: {{steps: {STEPS}, warmup_steps: {WARMUP}, lr: {LR}, min_lr: {MIN_LR}, "
                "log_every: 1, eval_every: 0}\n"
                "runtime: {timeout_s: 60, device: cpu}\n")
    return path


def logged_lrs(out):
    with open(f"{out}/metrics.jsonl") as f:
        records = [json.loads(line) for line in f if line.strip()]
    return {r["step"]: r["lr"] for r in records}


def train(config, out, *settings, resume=None):
    cmd = [tool("spmd-train"), "--config", config, "--set", f"output.dir={out}"]
    for s in settings:
        cmd += ["--set", s]
    if resume:
        cmd += ["--resume", resume]
    run(cmd, timeout=120)
    return logged_lrs(out)


def oracle_lrs(steps, **schedule):
    """train.lr x get_wsd_schedule's factor for updates 0..steps-1, read from the optimizer the
    LambdaLR drives (the learning rate optimizer.step() would use at each update)."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=LR)
    scheduler = optimization.get_wsd_schedule(opt, min_lr_ratio=MIN_LR / LR, **schedule)
    lrs = []
    for _ in range(steps):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    return lrs


def check_equal(got, want, what, first_step=1):
    """got: {metrics step: lr}; want: lrs of updates 0.. (update k is metrics step k + 1)."""
    steps = list(range(first_step, len(want) + 1))
    assert sorted(got) == steps, (what, sorted(got), steps)
    for step in steps:
        ours, theirs = got[step], want[step - 1]
        assert abs(ours - theirs) <= 1e-15 * LR, f"{what}: step {step}: ours {ours!r}, transformers {theirs!r}"


def check_schedules(d, config):
    for shape in ("linear", "cosine", "1-sqrt"):
        got = train(config, f"{d}/wsd-{shape}", "train.lr_schedule=wsd", f"train.decay_steps={DECAY}",
                    f"train.decay_shape={shape}")
        want = oracle_lrs(STEPS, num_warmup_steps=WARMUP, num_decay_steps=DECAY, num_training_steps=STEPS,
                          decay_type=shape)
        check_equal(got, want, f"wsd {shape}")
        assert want[WARMUP] == LR and want[STEPS - DECAY - 1] == LR and want[-1] < LR, want  # a real stable phase
    end = 15  # linear: down to min_lr at update 15, then min_lr
    got = train(config, f"{d}/linear", "train.lr_schedule=linear", f"train.decay_steps={end}")
    check_equal(got, oracle_lrs(STEPS, num_warmup_steps=WARMUP, num_decay_steps=end - WARMUP, num_stable_steps=0,
                                decay_type="linear"), "linear")
    got = train(config, f"{d}/constant", "train.lr_schedule=constant")
    check_equal(got, oracle_lrs(STEPS, num_warmup_steps=WARMUP, num_decay_steps=0, num_stable_steps=10**9),
                "constant")


def check_resume_with_new_length(d, config):
    """A checkpoint at step 10 (stable: decay starts at 16 of 24) resumed with 40 and with 16
    steps: from step 11 on the rates are those of a fresh run of 40 (16) steps, and transformers'."""
    ck = f"{d}/ck"
    wsd = ["train.lr_schedule=wsd", f"train.decay_steps={DECAY}", "train.decay_shape=1-sqrt"]
    train(config, f"{d}/first", *wsd, f"checkpoint.dir={ck}", "checkpoint.every=10", "checkpoint.keep=5")
    for steps in (40, 16):
        fresh = train(config, f"{d}/fresh-{steps}", *wsd, f"train.steps={steps}")
        out = f"{d}/resumed-{steps}"
        resumed = train(config, out, *wsd, f"train.steps={steps}", resume=f"{ck}/step_00000010")
        resumed = {s: lr for s, lr in resumed.items() if s > 10}
        assert resumed == {s: lr for s, lr in fresh.items() if s > 10}, (steps, resumed, fresh)
        want = oracle_lrs(steps, num_warmup_steps=WARMUP, num_decay_steps=DECAY, num_training_steps=steps,
                          decay_type="1-sqrt")
        check_equal(resumed, want, f"resumed with {steps} steps", first_step=11)
        for step, lr in resumed.items():  # the decay is at the new end: it starts at update steps - DECAY
            assert (lr == LR) if step <= steps - DECAY else (step == steps - DECAY + 1 or lr < LR), (steps, resumed)


def main():
    start = time.monotonic()
    d = temp_dir()
    try:
        config = tiny_config(d)
        check_schedules(d, config)
        check_resume_with_new_length(d, config)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(f"lr schedule oracle: ok in {time.monotonic() - start:.1f} s")


if __name__ == "__main__":
    main()
