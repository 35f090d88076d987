"""``python -m pipeline.demo_model.build``: tokenizer -> training -> CTranslate2 INT8 -> eval.

Run under ``.venv-train/bin/python`` (``babelstream models build-demo`` re-execs
itself there). Stages are resumable: training restarts from the last
checkpoint in the work directory.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from pipeline.demo_model import DEMO_DIR, PROJECT_ROOT, SPM_FILE

STAGES = ("tokenizer", "train", "convert", "eval")


def convert(hf_dir: Path, work_dir: Path, output: Path, quantization: str = "int8") -> Path:
    """Convert the trained HF model with CTranslate2's converter; add the SentencePiece model."""
    from ctranslate2.converters import TransformersConverter

    output.parent.mkdir(parents=True, exist_ok=True)
    TransformersConverter(str(hf_dir)).convert(str(output), quantization=quantization, force=True)
    shutil.copyfile(work_dir / SPM_FILE, output / SPM_FILE)
    return output


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns a process exit status."""
    parser = argparse.ArgumentParser(prog="babelstream models build-demo", description=__doc__)
    parser.add_argument("--work-dir", type=Path, default=PROJECT_ROOT / "var" / "demo-build")
    parser.add_argument("--output", type=Path, default=DEMO_DIR)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    parser.add_argument("--warmup", type=int, default=200, help="warm-up steps")
    parser.add_argument("--checkpoint-every", type=int, default=250)
    parser.add_argument("--max-words", type=int, default=45, help="longest training sentence")
    parser.add_argument(
        "--accented-share", type=float, default=0.08, help="share of words with accented letters"
    )
    parser.add_argument(
        "--init-from",
        type=Path,
        default=None,
        help="start from an earlier CTranslate2 demo model (tokens matched by string)",
    )
    parser.add_argument(
        "--new-tokens-only",
        action="store_true",
        help="with --init-from: train only the embeddings of tokens the earlier model lacked",
    )
    parser.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint")
    parser.add_argument(
        "--stages", default=",".join(STAGES), help=f"comma-separated subset of {','.join(STAGES)}"
    )
    args = parser.parse_args(argv)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        parser.error(f"unknown stage(s) {unknown}; choose from {STAGES}")
    work: Path = args.work_dir
    work.mkdir(parents=True, exist_ok=True)

    if {"tokenizer", "train"} & set(stages):
        from pipeline.demo_model import train as tr

        if "tokenizer" in stages and (args.fresh or not (work / SPM_FILE).exists()):
            tr.train_tokenizer(work)
            print(f"tokenizer: {work / SPM_FILE}", flush=True)
        if "train" in stages:
            cfg = tr.TrainConfig(
                steps=args.steps,
                batch_size=args.batch_size,
                threads=args.threads,
                seed=args.seed,
                lr=args.lr,
                warmup=args.warmup,
                checkpoint_every=args.checkpoint_every,
                max_words=args.max_words,
                accented_share=args.accented_share,
                new_tokens_only=args.new_tokens_only,
            )
            hf = tr.train(work, cfg, resume=not args.fresh, init_from=args.init_from)
            print(f"trained: {hf}", flush=True)
    if "convert" in stages:
        out = convert(work / "hf", work, args.output)
        size = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
        print(f"converted: {out} ({size / 1e6:.2f} MB)", flush=True)
    if "eval" in stages:
        from pipeline.demo_model.evaluate import evaluate_demo, write_metrics

        metrics = evaluate_demo(args.output, threads=args.threads)
        write_metrics(metrics, args.output)
        print(metrics.to_json(), flush=True)
        if not metrics.passed:
            print("demo model is below the chrF bar", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
