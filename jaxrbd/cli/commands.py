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
        help="fit mu (sliding_block: columns t,x,y), e (bouncing_ball: columns t,z), or the parameters of any "
        "scene factory (--scene module:function --param NAME=VALUE --fit NAME --columns COL=qI) to a CSV or NPZ",
    )
    fit.add_argument(
        "file",
        nargs="+",
        help="trajectory file: .csv, .tsv or .txt with a header row (a leading # is fine; tabs, commas or spaces) "
        "or .npz with one array per column; module:function and .xml scenes take several logs of one length, "
        "fitted together from the same start",
    )
    fit.add_argument(
        "--scene",
        required=True,
        help="sliding_block, bouncing_ball, an MJCF model file (.xml; its parameters: mu and restitution of "
        "every contact, the start coordinates qI and vI, and the file's parameters by name: j1.damping, "
        "link2.mass, u1.gear, ...), or module:function, a factory taking keyword parameters and returning a Scene (the "
        "module importable from the working folder or PYTHONPATH)",
    )
    fit.add_argument(
        "--dt", type=_number, required=True, help="the sample spacing (1/240 ok); the step is --dt / --substeps"
    )
    fit.add_argument(
        "--iterations",
        type=int,
        default=None,
        help="the optimizer's iteration budget (default 100); the simulation's steps come from the file and --substeps",
    )
    fit.add_argument("--steps", type=int, default=None, help=argparse.SUPPRESS)  # the former name of --iterations
    fit.add_argument(
        "--keyframe",
        default=None,
        metavar="NAME",
        help=".xml scenes: start from this <key> of the model file (its qpos and qvel; default the file's qpos0 at "
        "rest); a name or an index",
    )
    shortcut = fit.add_argument_group(
        "the shortcut scenes",
        "sliding_block: a box on the table z = 0 (four corner contacts, elliptic cone) fitted for mu, its start "
        "velocity and position to columns t,x,y; bouncing_ball: a ball above it (located Newton bounce) fitted for e, its "
        "start vertical velocity and height to columns t,z. Units: m, kg, s.",
    )
    shortcut.add_argument(
        "--half-extents",
        type=_numbers,
        default=None,
        metavar="HX,HY,HZ",
        help="sliding_block: the box's half extents (default 0.1,0.1,0.02: a 0.2 x 0.2 x 0.04 plate)",
    )
    shortcut.add_argument("--radius", type=_number, default=None, help="bouncing_ball: the radius (default 0.1)")
    shortcut.add_argument("--mass", type=_number, default=None, help="the body's mass (default 1)")
    shortcut.add_argument("--gravity", type=_number, default=None, help="g along -z (default 9.81)")
    shortcut.add_argument(
        "--start",
        type=_numbers,
        default=None,
        metavar="X,Y|Z",
        help="the start position, held: the block's centre X,Y or the ball's centre height Z (default: fitted, from "
        "the first sample)",
    )
    fit.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="module:function scenes: a keyword argument of the factory (the start value of a fitted one); repeat",
    )
    fit.add_argument("--fit", dest="fit_names", default="", metavar="NAME,NAME", help="the parameters to fit")
    fit.add_argument(
        "--columns",
        default="",
        metavar="COL=qI,...",
        help="map file columns to simulated coordinates: COL=qI (position coordinate I) or COL=vI (velocity)",
    )
    fit.add_argument(
        "--controls",
        default="",
        metavar="COL,...",
        help=".xml scenes: the columns that hold each actuator's control, in the file's actuator order, replayed "
        "in every step",
    )
    fit.add_argument(
        "--impact",
        choices=("none", "newton", "located", "poisson"),
        default=None,
        help="module:function and .xml scenes: the impact law (default none; located: Newton's with the impact "
        "time located in the step)",
    )
    fit.add_argument(
        "--substeps",
        type=int,
        default=1,
        help="simulation steps per sample: the step is --dt / SUBSTEPS (default 1)",
    )
    fit.add_argument(
        "--resample",
        action="store_true",
        help="interpolate the columns linearly onto a grid of --dt when the t column is not spaced by --dt "
        "(default: an error)",
    )
    fit.add_argument("--noise", type=float, default=None, help="the data's noise level, reported beside the RMS")
    fit.add_argument("--out", default="out", help="output folder for fit.json and fit.png (default: out)")
    fit.add_argument("--force", action="store_true", help="overwrite an existing fit.json")
    bench = sub.add_parser(
        "bench",
        help="the scene benchmark beside MuJoCo MJX and MuJoCo C (sphere_grid(64), four_balls, falling rod, "
        "cube on incline): compile time, steps/s, batched env-steps/s, gradient cost, memory, answers; "
        "then the scaling with the number of spheres",
    )
    bench.add_argument("--out", default="bench.json", help="write the numbers to this JSON file (default bench.json)")
    bench.add_argument("--plot", default="scaling.png", help="the scaling plot (default scaling.png)")
    bench.add_argument(
        "--scenes", nargs="*", default=None, help="subset of: sphere_grid four_balls falling_rod incline"
    )
    bench.add_argument("--batches", type=int, nargs="*", default=[64, 512, 4096])
    bench.add_argument("--repeats", type=int, default=3, help="timed runs per figure after warm-up (median)")
    bench.add_argument("--no-scaling", action="store_true", help="skip the scaling study")
    bench.add_argument(
        "--solvers",
        action="store_true",
        help="instead: the LCP solver table by problem size and the falling-rod rollout",
    )
    args = parser.parse_args(argv)
    import warnings

    import jax

    from .._config import configure
    from .._progress import log_lines

    warnings.formatwarning = _one_line_warning
    log_lines()  # progress as a line every few seconds where stderr is not a terminal

    # The benchmark measures compile time: no persistent cache there.
    configure(compilation_cache=args.command != "bench")
    jax.config.update("jax_enable_x64", not args.float32)
    if args.command == "demo":
        from .demo import run_demo

        run_demo(out=args.out)
    elif args.command == "reproduce":
        from .reproduce import run_reproduce

        run_reproduce(args.name, out=args.out)
    elif args.command == "fit":
        import sys

        from .fit import FitFailedError, TrajectoryFileError, run_fit, run_scene_fit

        if args.steps is not None:
            warnings.warn(
                "--steps is deprecated: use --iterations (the optimizer's budget)", FutureWarning, stacklevel=1
            )
            if args.iterations is None:
                args.iterations = args.steps
        iterations = 100 if args.iterations is None else args.iterations
        try:
            if args.keyframe is not None and not args.scene.lower().endswith(".xml"):
                raise TrajectoryFileError("--keyframe: only for a model file scene (--scene MODEL.xml)")
            shortcut = {
                k: getattr(args, k)
                for k in ("half_extents", "radius", "mass", "gravity", "start")
                if getattr(args, k) is not None
            }
            general = [k for k in ("param", "fit_names", "columns", "impact", "controls") if getattr(args, k)]
            if args.scene in ("sliding_block", "bouncing_ball"):
                if general:
                    raise TrajectoryFileError(f"{_flags(general)}: not for the shortcut scene {args.scene}")
                if len(args.file) > 1:
                    raise TrajectoryFileError(f"the shortcut scene {args.scene} fits one file, got {len(args.file)}")
                run_fit(
                    args.file[0],
                    scene=args.scene,
                    dt=args.dt,
                    out=args.out,
                    force=args.force,
                    iterations=iterations,
                    substeps=args.substeps,
                    resample=args.resample,
                    noise=args.noise,
                    **shortcut,
                )
            else:
                if shortcut:
                    raise TrajectoryFileError(
                        f"{_flags(shortcut)}: only for the shortcut scenes sliding_block and bouncing_ball; "
                        "a factory takes its own --param NAME=VALUE"
                    )
                run_scene_fit(
                    args.file if len(args.file) > 1 else args.file[0],
                    scene=args.scene,
                    dt=args.dt,
                    out=args.out,
                    params=args.param,
                    fit_names=args.fit_names,
                    columns=args.columns,
                    force=args.force,
                    iterations=iterations,
                    impact=args.impact or "none",
                    keyframe=args.keyframe,
                    substeps=args.substeps,
                    resample=args.resample,
                    noise=args.noise,
                    controls=args.controls,
                )
        except (TrajectoryFileError, FileExistsError) as err:
            print(f"jaxrbd fit: error: {err}", file=sys.stderr)
            raise SystemExit(2) from None
        except FitFailedError as err:
            print(f"jaxrbd fit: the fit failed: {err}", file=sys.stderr)
            raise SystemExit(1) from None
    elif args.command == "bench":
        if args.solvers:
            from .bench_solvers import main as bench_main

            bench_main(out=args.out)
        else:
            from .bench_scenes import CASES
            from .bench_scenes import main as scene_main

            cases = tuple(CASES) if args.scenes is None else tuple(args.scenes)
            unknown = set(cases) - set(CASES)
            if unknown:
                parser.error(f"unknown scenes {sorted(unknown)}; choose from {list(CASES)}")
            dtypes = ("float32",) if args.float32 else ("float32", "float64")
            scene_main(
                out=args.out,
                plot=args.plot,
                cases=cases,
                dtypes=dtypes,
                batches=tuple(args.batches),
                repeats=args.repeats,
                scale=not args.no_scaling,
            )


def _one_line_warning(message, category, filename, lineno, line=None):
    """A warning as the command line prints it: one line, its category and message, no source line."""
    text = " ".join(str(message).split())
    return f"jaxrbd: {category.__name__}: {text}\n"


def _number(text):
    """argparse type: a float or a fraction such as 1/240."""
    from .fit import TrajectoryFileError, parse_number

    try:
        return parse_number(text)
    except TrajectoryFileError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _numbers(text):
    """argparse type: comma-separated floats or fractions, '0.1,0.1,0.02'."""
    return tuple(_number(part) for part in text.split(","))


def _flags(names):
    """'--half-extents, --fit' from argparse destinations."""
    flag = {"fit_names": "fit"}
    return ", ".join("--" + flag.get(k, k).replace("_", "-") for k in names)
