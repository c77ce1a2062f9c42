#!/usr/bin/env python3
"""PyTorch and CUDA-library workloads for the GPU check (issue 3), run natively and through gpool.

  workloads.py run --out DIR [--only NAME ...]   runs every workload, each in its own process (a crash
                                                  costs one row), writing DIR/NAME.json
  workloads.py compare NATIVE_DIR GPOOL_DIR      compares the two runs and prints a table; exits 1 when
                                                  a workload fails or differs

Whether a run goes through gpool is decided by the environment (gpu_check.sh sets LD_LIBRARY_PATH and
GPOOL_SERVER), not by this script: the workloads are plain PyTorch/CuPy code. Results are kept as small
JSON summaries (losses, sampled tensor values) so that `compare` needs no GPU and no PyTorch, and is
tested in CI (workloads_compare_test.py).
"""
import argparse
import json
import os
import subprocess
import sys
import time

# Relative tolerance by the dtype a value was computed in.
TOLERANCE = {"fp64": 1e-9, "fp32": 1e-4, "tf32": 5e-3, "bf16": 3e-2, "fp16": 1e-2, "int": 0.0, "str": 0.0}
SAMPLE = 2048  # values kept per tensor


# ---------------------------------------------------------------------------------------------------
# Helpers used inside a workload process (they import torch lazily).

def values(t, dtype):
    """A tensor (or list of floats) as a comparable record: a sample of its values plus sum and abs-sum."""
    import torch
    if isinstance(t, (list, tuple)):
        flat = [float(v) for v in t]
    else:
        x = t.detach().float().cpu().flatten() if not t.is_complex() else torch.view_as_real(t.detach()).float().cpu().flatten()
        step = max(1, x.numel() // SAMPLE)
        flat = x[::step][:SAMPLE].tolist() + [float(x.sum()), float(x.abs().sum())]
    return {"dtype": dtype, "data": flat}


def timed_steps(step, steps, warmup):
    import torch
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps


def deterministic():
    import torch
    torch.manual_seed(1234)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


# ---------------------------------------------------------------------------------------------------
# Workloads: each returns {"values": {...}, "timings": {...}} and raises on failure.

def w_tensors():
    import torch
    deterministic()
    cpu = torch.randn(1 << 20, generator=torch.Generator().manual_seed(1))
    g = cpu.cuda()                                   # pageable H2D
    back = g.cpu()                                   # pageable D2H
    pinned = torch.empty_like(cpu).pin_memory()
    pinned.copy_(cpu)
    g2 = pinned.to("cuda", non_blocking=True)        # pinned async H2D
    out = torch.empty_like(cpu).pin_memory()
    out.copy_(g2 * 3 + 1, non_blocking=True)         # pinned async D2H
    torch.cuda.synchronize()
    assert torch.equal(back, cpu), "pageable round trip changed the data"
    assert torch.allclose(out, cpu * 3 + 1), "pinned non_blocking round trip is wrong"
    x = g.view(1024, 1024)
    r = {"relu_sum": values(torch.relu(x).sum(dim=1), "fp32"), "softmax": values(torch.softmax(x, dim=1), "fp32"),
         "max": values(x.max(dim=0).values, "fp32"), "cumsum": values(torch.cumsum(x[0], 0), "fp32"),
         "argmax": values(x.argmax(dim=1).float(), "int"), "sort": values(torch.sort(x[3]).values, "fp32")}
    return {"values": r}


def w_streams_events():
    import torch
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    a = torch.ones(1 << 20, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(s1):
        start.record()
        for _ in range(10):
            a = a * 1.5
        end.record()
    s2.wait_stream(s1)
    with torch.cuda.stream(s2):
        b = a + 1
    torch.cuda.synchronize()
    assert start.elapsed_time(end) >= 0
    assert end.query()
    return {"values": {"b": values(b[:16], "fp32")}}


def w_device_info():
    import torch
    free, total = torch.cuda.mem_get_info()
    p = torch.cuda.get_device_properties(0)
    assert 0 < free <= total == p.total_memory, (free, total, p.total_memory)
    return {"values": {"name": {"dtype": "str", "data": [torch.cuda.get_device_name(0)]},
                       "props": {"dtype": "int", "data": [p.total_memory, p.multi_processor_count, p.major, p.minor]},
                       "count": {"dtype": "int", "data": [torch.cuda.device_count()]}}}


def w_caching_allocator():
    import random
    import torch
    rng = random.Random(7)
    live = []
    for i in range(3000):
        if live and rng.random() < 0.45:
            live.pop(rng.randrange(len(live)))
        else:
            live.append(torch.empty(rng.choice([1, 7, 512, 4096, 1 << 16, 1 << 20, 3 << 20]), device="cuda"))
    allocated = torch.cuda.memory_allocated()
    live.clear()
    torch.cuda.empty_cache()
    assert torch.cuda.memory_allocated() == 0
    return {"values": {"peak_reserved_positive": {"dtype": "int", "data": [int(torch.cuda.max_memory_reserved() > 0)]},
                       "allocated": {"dtype": "int", "data": [allocated]}}}


def w_matmul():
    import torch
    deterministic()
    a = torch.randn(1024, 768, device="cuda")
    b = torch.randn(768, 512, device="cuda")
    r = {}
    torch.backends.cuda.matmul.allow_tf32 = False
    r["fp32"] = values(a @ b, "fp32")
    torch.backends.cuda.matmul.allow_tf32 = True
    r["tf32"] = values(a @ b, "tf32")
    torch.backends.cuda.matmul.allow_tf32 = False
    r["bf16"] = values(a.bfloat16() @ b.bfloat16(), "bf16")
    r["bmm"] = values(torch.bmm(a[:512].view(8, 64, 768), b.expand(8, 768, 512)), "fp32")
    r["addmm_lt"] = values(torch.addmm(torch.randn(512, device="cuda"), a, b), "fp32")  # cuBLASLt epilogue
    t = timed_steps(lambda: a @ b, 50, 5)
    return {"values": r, "timings": {"matmul_1024x768x512_s": t}}


def w_cudnn():
    import torch
    import torch.nn.functional as F
    deterministic()
    x = torch.randn(16, 8, 32, 32, device="cuda", requires_grad=True)
    w = torch.randn(16, 8, 3, 3, device="cuda", requires_grad=True)
    y = F.conv2d(x, w, padding=1)
    bn = torch.nn.BatchNorm2d(16).cuda()
    z = bn(y)
    z.square().mean().backward()
    return {"values": {"conv": values(y, "fp32"), "bn": values(z, "fp32"), "grad_w": values(w.grad, "fp32"),
                       "running_mean": values(bn.running_mean, "fp32")}}


def train(model, data, record, timed, autocast=None, scaler=None):
    """SGD steps over `data` (cycled): the first `record` losses, then the mean time of `timed` steps."""
    import torch
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    losses, state = [], {"i": 0}

    def step(keep=False):
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type="cuda", dtype=autocast, enabled=autocast is not None):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        if keep:
            losses.append(loss.item())

    for _ in range(record):
        step(keep=True)
    return losses, timed_steps(step, timed, 5)


def batches(count, x_shape, classes, seed):
    import torch
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(*x_shape, generator=gen).cuda(), torch.randint(0, classes, (x_shape[0],), generator=gen).cuda())
            for _ in range(count)]


def w_mlp():
    import torch
    deterministic()
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                                torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
    losses, t = train(model, batches(8, (256, 512), 10, 5), record=20, timed=100)
    return {"values": {"losses": values(losses, "fp32")}, "timings": {"mlp_step_s": t}}


def w_resnet18():
    import torch
    import torchvision
    deterministic()
    model = torchvision.models.resnet18(num_classes=10).cuda()
    losses, t = train(model, batches(4, (64, 3, 64, 64), 10, 9), record=10, timed=50, autocast=torch.bfloat16,
                      scaler=torch.amp.GradScaler("cuda"))
    return {"values": {"losses": values(losses, "bf16")}, "timings": {"resnet18_step_s": t}}


def w_compile():
    import torch
    deterministic()

    def f(x, y):
        return torch.sin(x) * y + torch.cos(y).sum(dim=-1, keepdim=True)

    cf = torch.compile(f)
    x = torch.randn(512, 512, device="cuda")
    y = torch.randn(512, 512, device="cuda")
    out = cf(x, y)
    eager = f(x, y)
    assert torch.allclose(out, eager, rtol=1e-4, atol=1e-4), "compiled result differs from eager"
    return {"values": {"compiled": values(out, "fp32")}}


def w_fft_sparse():
    import torch
    deterministic()
    x = torch.randn(64, 64, dtype=torch.complex64, device="cuda")
    f = torch.fft.fft2(x)
    idx = torch.tensor([[0, 1, 2, 3, 5], [1, 0, 4, 2, 3]])
    vals = torch.tensor([1.0, -2.0, 3.0, 0.5, 4.0])
    sp = torch.sparse_coo_tensor(idx, vals, (6, 5)).cuda()
    dense = torch.randn(5, 7, device="cuda")
    m = torch.sparse.mm(sp, dense)
    return {"values": {"fft2": values(f, "fp32"), "sparse_mm": values(m, "fp32")}}


def w_cuda_graph():
    import torch
    deterministic()
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)).cuda()
    static_in = torch.randn(32, 256, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model(static_in)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = model(static_in)
    outs = []
    gen = torch.Generator().manual_seed(3)
    for _ in range(3):
        static_in.copy_(torch.randn(32, 256, generator=gen).cuda())
        g.replay()
        outs.append(static_out.clone())
        assert torch.allclose(static_out, model(static_in), rtol=1e-4, atol=1e-5), "replay differs from eager"
    return {"values": {"replays": values(torch.stack(outs), "fp32")}}


def w_green_context():
    """A green context of 16 of the GPU's SMs (torch.cuda.green_contexts, PyTorch 2.9 and later): a matmul in
    it, on a stream of its own (2.12 and later) or on its default stream while it is current (2.9 to 2.11),
    equals the same matmul outside it."""
    import torch
    green = getattr(torch.cuda, "green_contexts", None)
    if green is None:
        raise RuntimeError(f"PyTorch {torch.__version__} has no torch.cuda.green_contexts (2.9 or later)")
    deterministic()
    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(1024, 768, device="cuda")
    b = torch.randn(768, 512, device="cuda")
    outside = a @ b
    ctx = green.GreenContext.create(num_sms=16, device_id=0)
    if hasattr(ctx, "Stream"):
        s = ctx.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            inside = a @ b
        torch.cuda.current_stream().wait_stream(s)
    else:
        ctx.set_context()
        inside = a @ b
        ctx.pop_context()
    torch.cuda.synchronize()
    assert torch.allclose(inside, outside, rtol=1e-5, atol=1e-5), "the green context's matmul differs from the one outside"
    return {"values": {"inside": values(inside, "fp32")}}


def w_cupy():
    import cupy
    a = cupy.arange(1 << 16, dtype=cupy.float32)
    b = (a * 2 + 1).sum()
    kernel = cupy.RawKernel(r'''
extern "C" __global__ void twice(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i];
}''', "twice")
    y = cupy.empty_like(a)
    kernel(((a.size + 255) // 256,), (256,), (a, y, cupy.int32(a.size)))
    assert float(y[12345]) == 24690.0
    return {"values": {"sum": {"dtype": "fp32", "data": [float(b)]}, "raw": {"dtype": "fp32", "data": cupy.asnumpy(y[:64]).tolist()}}}


def w_nccl():
    import tempfile
    import torch
    import torch.distributed as dist
    with tempfile.NamedTemporaryFile() as f:
        dist.init_process_group("nccl", init_method=f"file://{f.name}", rank=0, world_size=1)
        try:
            t = torch.arange(16, dtype=torch.float32, device="cuda")
            dist.all_reduce(t)
            torch.cuda.synchronize()
        finally:
            dist.destroy_process_group()
    return {"values": {"all_reduce": values(t, "fp32")}}


def second_device():
    """cuda:1 where the process has two devices (through gpool: two shares of the one GPU), else cuda:0:
    the same computation natively on the one GPU is the reference."""
    import torch
    return "cuda:1" if torch.cuda.device_count() > 1 else "cuda:0"


def w_two_devices():
    """Issue 12: tensors moved between cuda:0 and the second device, and a model split across both, trained."""
    import torch
    deterministic()
    d0, d1 = "cuda:0", second_device()
    x = torch.arange(1 << 20, dtype=torch.float32, device=d0)
    moved = (x.to(d1) * 2).to(d0) + 1
    first = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU()).to(d0)
    second = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).to(d1)
    opt = torch.optim.SGD(list(first.parameters()) + list(second.parameters()), lr=0.01, momentum=0.9)
    data = batches(8, (256, 512), 10, 5)
    losses = []
    for i in range(20):
        xb, yb = data[i % len(data)]
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(second(first(xb).to(d1)), yb.to(d1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {"values": {"moved": values(moved, "fp32"), "losses": values(losses, "fp32")}}


TORCHRUN_SCRIPT = """
import os, sys, torch, torch.distributed as dist
rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("gloo")
device = f"cuda:{rank}" if torch.cuda.device_count() > 1 else "cuda:0"
torch.cuda.set_device(device)
torch.manual_seed(7 + rank)
a = torch.randn(512, 512, device=device)
local = (a @ a).sum().double().cpu()
dist.all_reduce(local)
if rank == 0:
    open(sys.argv[1], "w").write(f"{local.item()!r} {torch.cuda.current_device()}\n")
dist.destroy_process_group()
"""


def w_torchrun_two():
    """Issue 12: torchrun with two processes, one device each (gloo between them: NCCL cannot run on gpool)."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        script, result = os.path.join(d, "rank.py"), os.path.join(d, "result")
        with open(script, "w") as f:
            f.write(TORCHRUN_SCRIPT)
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", script, result],
                       check=True, capture_output=True, text=True, timeout=240)
        with open(result) as f:
            total = f.read().split()[0]
    return {"values": {"all_reduced": {"dtype": "fp32", "data": [float(total)]}}}


# JAX (issue 9): XLA's GPU runtime, which TensorFlow shares, run unmodified with JAX's default settings
# (it preallocates most of the GPU's memory, builds CUDA graphs and links kernels at run time).

def jax_values(x, dtype):
    import numpy as np
    flat = np.asarray(x, dtype=np.float64).ravel()
    step = max(1, flat.size // SAMPLE)
    return {"dtype": dtype, "data": flat[::step][:SAMPLE].tolist() + [float(flat.sum()), float(np.abs(flat).sum())]}


def w_jax_mlp():
    import jax
    import jax.numpy as jnp
    import numpy as np
    assert jax.default_backend() == "gpu", f"JAX runs on {jax.default_backend()}, not the GPU"
    rng = np.random.default_rng(5)
    sizes = [(512, 1024), (1024, 1024), (1024, 10)]
    params = [(jnp.asarray(rng.standard_normal(s, dtype=np.float32) * (2 / s[0]) ** 0.5),
               jnp.zeros(s[1], jnp.float32)) for s in sizes]
    data = [(jnp.asarray(rng.standard_normal((256, 512), dtype=np.float32)), jnp.asarray(rng.integers(0, 10, 256)))
            for _ in range(8)]

    def loss_fn(params, x, y):
        for w, b in params[:-1]:
            x = jax.nn.relu(x @ w + b)
        logits = x @ params[-1][0] + params[-1][1]
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))

    @jax.jit
    def step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads), loss

    losses = []
    for i in range(20):
        params, loss = step(params, *data[i % len(data)])
        losses.append(float(loss))
    for i in range(5):
        params, loss = step(params, *data[i % len(data)])
    loss.block_until_ready()
    start = time.perf_counter()
    for i in range(100):
        params, loss = step(params, *data[i % len(data)])
    loss.block_until_ready()
    t = (time.perf_counter() - start) / 100
    return {"values": {"losses": jax_values(losses, "tf32")}, "timings": {"jax_mlp_step_s": t}}


def w_jax_scan():
    import jax
    import jax.numpy as jnp
    import numpy as np
    rng = np.random.default_rng(11)
    w = jnp.asarray(rng.standard_normal((64, 64), dtype=np.float32) / 8)
    xs = jnp.asarray(rng.standard_normal((200, 64), dtype=np.float32))

    @jax.jit
    def run(h0):
        def body(h, x):
            h = jnp.tanh(h @ w + x)
            return h, h.sum()
        return jax.lax.scan(body, h0, xs)

    h, sums = run(jnp.zeros(64, jnp.float32))
    return {"values": {"final": jax_values(h, "tf32"), "sums": jax_values(sums, "tf32")}}


def w_jax_fft():
    import jax
    import jax.numpy as jnp
    import numpy as np
    rng = np.random.default_rng(13)
    x = jnp.asarray((rng.standard_normal((128, 128)) + 1j * rng.standard_normal((128, 128))).astype(np.complex64))
    f = jax.jit(jnp.fft.fft2)(x)
    r = jnp.fft.irfft(jnp.fft.rfft(x.real))
    f = np.asarray(f)
    return {"values": {"fft2": jax_values(np.stack([f.real, f.imag]), "fp32"), "rfft_roundtrip": jax_values(r, "fp32")}}


WORKLOADS = {
    "tensors": w_tensors, "streams_events": w_streams_events, "device_info": w_device_info,
    "caching_allocator": w_caching_allocator, "matmul": w_matmul, "cudnn": w_cudnn, "mlp": w_mlp,
    "resnet18": w_resnet18, "compile": w_compile, "fft_sparse": w_fft_sparse, "cuda_graph": w_cuda_graph,
    "green_context": w_green_context, "cupy": w_cupy, "nccl": w_nccl, "two_devices": w_two_devices, "torchrun_two": w_torchrun_two,
    "jax_mlp": w_jax_mlp, "jax_scan": w_jax_scan, "jax_fft": w_jax_fft,
}


def run_one(name, out_dir):
    start = time.perf_counter()
    record = {"name": name, "ok": False}
    try:
        record.update(WORKLOADS[name]())
        record["ok"] = True
    except Exception as e:  # recorded, not raised: the table shows it
        record["error"] = f"{type(e).__name__}: {e}"[:500]
    record["seconds"] = time.perf_counter() - start
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump(record, f)
    return 0


def run_all(out_dir, only, timeout):
    os.makedirs(out_dir, exist_ok=True)
    for name in only or WORKLOADS:
        t0 = time.perf_counter()
        try:
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "one", name, "--out", out_dir],
                               timeout=timeout, capture_output=True, text=True)
            tail = (p.stdout + p.stderr)[-1500:]
            if p.returncode != 0 or not os.path.exists(os.path.join(out_dir, name + ".json")):
                with open(os.path.join(out_dir, name + ".json"), "w") as f:
                    json.dump({"name": name, "ok": False, "error": f"process exited {p.returncode}: {tail}"}, f)
            with open(os.path.join(out_dir, name + ".log"), "w") as f:
                f.write(p.stdout + p.stderr)
        except subprocess.TimeoutExpired:
            with open(os.path.join(out_dir, name + ".json"), "w") as f:
                json.dump({"name": name, "ok": False, "error": f"timed out after {timeout} s"}, f)
        print(f"  {name}: {time.perf_counter() - t0:.1f} s", flush=True)


# ---------------------------------------------------------------------------------------------------
# Comparison (pure Python).

def close(a, b, dtype):
    if dtype == "str":
        return a == b
    tol = TOLERANCE.get(dtype, 1e-4)
    if len(a) != len(b):
        return False
    scale = max([abs(v) for v in a] + [1e-30])
    for x, y in zip(a, b):
        if abs(x - y) > tol * max(abs(x), abs(y)) + tol * 1e-3 * scale:
            return False
    return True


def compare(native_dir, gpool_dir, names=None):
    """Returns (rows, ok). A row: name, native verdict, gpool verdict, match, native s, gpool s, ratio, note."""
    rows, ok = [], True
    names = names or sorted(n[:-5] for n in os.listdir(native_dir) if n.endswith(".json"))
    for name in names:
        def load(d):
            try:
                with open(os.path.join(d, name + ".json")) as f:
                    return json.load(f)
            except (OSError, ValueError):
                return {"ok": False, "error": "no result"}
        n, g = load(native_dir), load(gpool_dir)
        note, match = "", "-"
        if n.get("ok") and g.get("ok"):
            diffs = [k for k, v in n.get("values", {}).items()
                     if k not in g.get("values", {}) or not close(v["data"], g["values"][k]["data"], v["dtype"])]
            match = "same" if not diffs else "DIFFERENT"
            note = ("differs: " + ", ".join(diffs)) if diffs else ""
        elif n.get("ok"):
            note = "gpool: " + g.get("error", "?")
        else:
            note = "native: " + n.get("error", "?")
        if match != "same":
            ok = False
        rows.append([name, "pass" if n.get("ok") else "FAIL", "pass" if g.get("ok") else "FAIL", match, "", "", "", note])
        for key, tn in n.get("timings", {}).items():
            tg = g.get("timings", {}).get(key)
            ratio = f"{tg / tn:.2f}x" if tg and tn else "-"
            rows.append([f"  {key}", "", "", "", f"{tn * 1e3:.2f} ms", f"{tg * 1e3:.2f} ms" if tg else "-", ratio, ""])
    return rows, ok


def print_table(rows):
    header = ["workload", "native", "gpool", "results", "native t", "gpool t", "gpool/native", "note"]
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(7)]
    line = lambda r: "  ".join(str(c).ljust(widths[i]) for i, c in enumerate(r[:7])) + ("  " + r[7] if r[7] else "")
    print(line(header))
    for r in rows:
        print(line(r))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", required=True)
    r.add_argument("--only", nargs="*")
    r.add_argument("--timeout", type=int, default=300)
    o = sub.add_parser("one")
    o.add_argument("name", choices=sorted(WORKLOADS))
    o.add_argument("--out", required=True)
    c = sub.add_parser("compare")
    c.add_argument("native")
    c.add_argument("gpool")
    a = ap.parse_args()
    if a.cmd == "run":
        return run_all(a.out, a.only, a.timeout) or 0
    if a.cmd == "one":
        return run_one(a.name, a.out)
    rows, ok = compare(a.native, a.gpool)
    print_table(rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
