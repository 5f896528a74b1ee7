"""The `jaxrbd` command line."""

import argparse


def main(argv=None):
    parser = argparse.ArgumentParser(prog="jaxrbd", description="Differentiable rigid-body contact simulation in JAX.")
    parser.add_argument("--float32", action="store_true", help="compute in float32 (default: float64)")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="the falling rod's impact step (P1) and a solver study, with a plot")
    demo.add_argument("--out", default="out", help="output folder (default: out)")
    demo.add_argument("--problems", type=int, default=200, help="random LCPs in the study (multiple of 100)")
    bench = sub.add_parser("bench", help="print the solver performance table")
    bench.add_argument("--out", default=None, help="also write the table to this JSON file")
    bench.add_argument("--batch", type=int, default=256)
    bench.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    import jax

    jax.config.update("jax_enable_x64", not args.float32)
    if args.command == "demo":
        if args.problems < 100 or args.problems % 100:
            parser.error(f"--problems must be a positive multiple of 100, got {args.problems}")
        from ._demo import run_demo

        run_demo(out=args.out, n_problems=args.problems)
    elif args.command == "bench":
        from ._bench import main as bench_main

        bench_main(out=args.out, batch=args.batch, repeats=args.repeats)


if __name__ == "__main__":
    main()
