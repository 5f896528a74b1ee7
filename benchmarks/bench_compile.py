"""How long a new process takes to its first simulated second: import, scene build, trace, compile and run.

python benchmarks/bench_compile.py [--scenes "cube_toss()" "four_balls()" "box_stack(3)"] [--steps 100] [--runs 2]

Each line is a fresh Python process (a warm one would hold the compiled programs): `import jaxrbd`, building the
scene, and the first call of a jitted `--steps`-step rollout, split into tracing and lowering (`jit(...).lower`),
XLA's compilation and the run; then the XLA programs compiled while building the scene (none is the goal: a scene
is built with numpy on the host). "cold" runs with the persistent compilation cache off; "cached" runs with a cache
directory that the first of its `--runs` processes fills ("filling"), so that the later ones load the rollout
from it.
float64, h = 0.01.
"""

import argparse
import json
import subprocess
import sys
import tempfile

_PROCESS = """
import json, logging, sys, time
t0 = time.perf_counter()
import jax
import jaxrbd as rbd
rbd.configure(compilation_cache=sys.argv[3] if sys.argv[3] != "off" else False)
jax.config.update("jax_enable_x64", True)
t1 = time.perf_counter()
compiled = []
handler = logging.Handler()
handler.emit = lambda record: compiled.append(1) if record.getMessage().startswith("Compiling") else None
logging.getLogger("jax").addHandler(handler)
with jax.log_compiles(True):
    scene = eval("rbd.scenes." + sys.argv[1])
logging.getLogger("jax").removeHandler(handler)
t2 = time.perf_counter()
steps = int(sys.argv[2])
rollout = jax.jit(lambda state: rbd.simulate(scene.system, state, dt=0.01, steps=steps))
lowered = rollout.lower(scene.state)
t3 = time.perf_counter()
executable = lowered.compile()
t4 = time.perf_counter()
traj = jax.block_until_ready(executable(scene.state))
t5 = time.perf_counter()
print(json.dumps(dict(import_s=t1 - t0, build_s=t2 - t1, build_compiles=len(compiled), trace_s=t3 - t2,
                      compile_s=t4 - t3, run_s=t5 - t4, first_call_s=t5 - t2,
                      converged=bool(traj.stats.converged.all()))))
"""

SCENES = ("cube_toss()", "four_balls()", "box_stack(3)")


def run(scene, steps, cache):
    out = subprocess.run(
        [sys.executable, "-c", _PROCESS, scene, str(steps), cache], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenes", nargs="+", default=list(SCENES), help="calls of jaxrbd.scenes functions")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--runs", type=int, default=2, help="processes per cached scene (the first fills the cache)")
    args = parser.parse_args()
    columns = ("import_s", "build_s", "build_compiles", "trace_s", "compile_s", "run_s", "first_call_s")
    print(f"{'scene':16s} {'cache':8s} " + " ".join(f"{c:>14s}" for c in columns) + "  converged")
    for scene in args.scenes:
        with tempfile.TemporaryDirectory() as cache:
            for label, where in [("cold", "off"), ("filling", cache)] + [("cached", cache)] * (args.runs - 1):
                r = run(scene, args.steps, where)
                cells = " ".join(f"{r[c]:14d}" if isinstance(r[c], int) else f"{r[c]:14.2f}" for c in columns)
                print(f"{scene:16s} {label:8s} {cells}  {r['converged']}", flush=True)


if __name__ == "__main__":
    main()
