"""The `jaxrbd` command line."""

import argparse


def main(argv=None):
    parser = argparse.ArgumentParser(prog="jaxrbd", description="Differentiable rigid-body contact simulation in JAX.")
    parser.add_argument("--float32", action="store_true", help="compute in float32 (default: float64)")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo", help="the falling rod (P1) at four step sizes: event times beside the paper's, plots, animation"
    )
    demo.add_argument("--out", default="out", help="output folder (default: out)")
    reproduce = sub.add_parser(
        "reproduce",
        help="a reference problem beside its paper: falling_rod (P1), four_balls (P2), spinning_sphere (P3), "
        "sphere_in_seam (P4), painleve (P5) or all",
    )
    reproduce.add_argument(
        "name", choices=("falling_rod", "four_balls", "spinning_sphere", "sphere_in_seam", "painleve", "all")
    )
    reproduce.add_argument("--out", default="out", help="output folder for the figures (default: out)")
    fit = sub.add_parser(
        "fit",
        help="fit mu (sliding_block: columns t,x,y) or e (bouncing_ball: columns t,z) to a CSV or NPZ trajectory",
    )
    fit.add_argument("file", help="trajectory file, .csv with a header row or .npz with one array per column")
    fit.add_argument("--scene", required=True, choices=("sliding_block", "bouncing_ball"))
    fit.add_argument("--dt", type=float, required=True, help="the sample spacing, used as the step size")
    fit.add_argument("--steps", type=int, default=100, help="optimizer step budget (default 100)")
    fit.add_argument("--radius", type=float, default=0.1, help="bouncing_ball: the ball's radius (default 0.1)")
    fit.add_argument("--out", default="out", help="output folder for fit.json and fit.png (default: out)")
    fit.add_argument("--force", action="store_true", help="overwrite an existing fit.json")
    bench = sub.add_parser("bench", help="print the performance tables: falling-rod rollout, then LCP solvers by size")
    bench.add_argument("--out", default=None, help="also write the table to this JSON file")
    bench.add_argument("--batch", type=int, default=256)
    bench.add_argument("--repeats", type=int, default=3)
    bench.add_argument(
        "--rod-only", action="store_true", help="only the falling-rod rollout table (skip the LCP sizes)"
    )
    args = parser.parse_args(argv)

    import jax

    jax.config.update("jax_enable_x64", not args.float32)
    if args.command == "demo":
        from ._demo import run_demo

        run_demo(out=args.out)
    elif args.command == "reproduce":
        from ._reproduce import run_reproduce

        run_reproduce(args.name, out=args.out)
    elif args.command == "fit":
        import sys

        from ._fitcli import TrajectoryFileError, run_fit

        try:
            run_fit(
                args.file,
                scene=args.scene,
                dt=args.dt,
                out=args.out,
                force=args.force,
                steps=args.steps,
                radius=args.radius,
            )
        except (TrajectoryFileError, FileExistsError) as err:
            print(f"jaxrbd fit: error: {err}", file=sys.stderr)
            raise SystemExit(2) from None
    elif args.command == "bench":
        from ._bench import main as bench_main

        bench_main(out=args.out, batch=args.batch, repeats=args.repeats, solvers=not args.rod_only)


if __name__ == "__main__":
    main()
