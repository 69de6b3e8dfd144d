"""Issue 19's transformer rewrites on and off, side by side: ``pack_linears`` and the masked
forms of ``fuse_attention`` (``passes/packing.py``, ``passes/fusion.py``).

For each case, four ``StaticModule``s of the same TorchScript module are built — the
defaults (``new``), ``pack_linears=False``, ``fuse_attention=False``, and both off (``before``:
what ran before these rewrites, where a model has no unmasked written-out attention, as none
of the cases here has) — checked against the TorchScript interpreter, then timed in
alternation (the order reversed every other round), one thread, inference mode: the median
of ``--repeats`` samples of about 20 ms each, on this thread's CPU clock (steadier than wall
time on a shared machine). Cases: the zoo's transformers (``zoo:NAME:BATCH``) and
``bert_eager:BATCH[:LENGTH]``, the zoo's ``hf_bert`` built with
``attn_implementation="eager"`` (the written-out attention with an added float mask that
older exports and TorchScript files carry), on padded inputs of ``LENGTH`` tokens (32, as the
zoo's, unless given).

    python benchmarks/transformer_rewrites.py                         # ~6 minutes
    python benchmarks/transformer_rewrites.py --cases bert_eager:1,zoo:hf_bert:8
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings
from pathlib import Path

import click
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import static_runtime as sr

CONFIGS = {
    "new": {},
    "no_pack": {"pack_linears": False},
    "no_attention": {"fuse_attention": False},
    "before": {"pack_linears": False, "fuse_attention": False},
}
ZOO_CASES = [f"zoo:{name}:{b}" for name, batches in (
    ("hf_bert", (1, 8)), ("hf_distilbert", (1, 8)), ("hf_roberta", (1, 8)),
    ("sentence_embedder", (1, 8)), ("hf_llama", (1, 4)), ("llama_scripted", (1, 4)),
    ("moe_top2", (1, 8)), ("hf_t5", (1, 4)), ("hf_bart", (1, 4)), ("hf_vit", (1, 8)),
    ("hf_swin", (1, 8)), ("hf_wav2vec2", (1, 4)), ("hf_whisper_encoder", (1, 8)))
    for b in batches]
CASES = ["bert_eager:1", "bert_eager:8", "bert_eager:1:128", "bert_eager:8:128", *ZOO_CASES]


def _case(case: str) -> tuple[torch.jit.ScriptModule, tuple]:
    from benchmarks.zoo import ZOO

    if case.startswith("bert_eager:"):
        import transformers

        from benchmarks.zoo.spec import hf_config, padding_mask, token_ids

        batch, length = (int(n) for n in (case.split(":")[1:] + ["32"])[:2])
        torch.manual_seed(0)
        eager = transformers.BertModel(hf_config(
            transformers.BertConfig, vocab_size=1000, hidden_size=128, num_hidden_layers=2,
            num_attention_heads=2, intermediate_size=512, max_position_embeddings=512,
            attn_implementation="eager")).eval()

        def inputs(b: int) -> tuple:
            g = torch.Generator().manual_seed(0)
            return token_ids(g, b, length, 1000), padding_mask(g, b, length)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scripted = torch.jit.trace(eager, inputs(1), check_trace=False, strict=False)
        return scripted.eval(), inputs(batch)
    name, batch = case.rsplit(":", 1)
    model = ZOO[name[len("zoo:"):]]
    return model.scripted(), model.inputs(int(batch))


def _time(fns: dict, calls: int, repeats: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(repeats):
        order = list(fns.items()) if r % 2 == 0 else list(reversed(fns.items()))
        for key, fn in order:
            start = time.thread_time()
            for _ in range(calls):
                fn()
            samples[key].append((time.thread_time() - start) / calls * 1e6)
    return {k: statistics.median(v) for k, v in samples.items()}


def _changed(mods: dict) -> str:
    kinds = {k: [n.kind for n in m.graph.walk()] for k, m in mods.items()}
    parts = []
    if kinds["new"] != kinds["no_pack"]:
        parts.append(f"linears {kinds['no_pack'].count('aten::linear')}→"
                     f"{kinds['new'].count('aten::linear')}")
    masked = kinds["new"].count("static_runtime::masked_attention")
    if masked:
        parts.append(f"{masked} masked attention")
    return ", ".join(parts) or "unchanged"


@click.command()
@click.option("--cases", default=",".join(CASES), show_default=True)
@click.option("--repeats", default=15, show_default=True)
def main(cases: str, repeats: int) -> None:
    torch.set_num_threads(1)
    print("| case | what changed | before µs | new µs | new ÷ before | pack only | "
          "attention only |")
    print("|---|---|--:|--:|--:|--:|--:|")
    for case in cases.split(","):
        scripted, inputs = _case(case)
        mods = {k: sr.StaticModule(scripted, sr.StaticModuleOptions(**o))
                for k, o in CONFIGS.items()}
        with torch.inference_mode():
            expected = scripted(*inputs)
        for mod in mods.values():
            for _ in range(3):
                torch.testing.assert_close(mod(*inputs), expected, rtol=1e-4, atol=1e-5)
        start = time.thread_time()
        for _ in range(5):
            mods["new"](*inputs)
        calls = max(3, int(20_000 / max(1.0, (time.thread_time() - start) / 5 * 1e6)))
        t = _time({k: (lambda m=m, x=inputs: m(*x)) for k, m in mods.items()}, calls, repeats)
        b = t["before"]
        print(f"| {case} | {_changed(mods)} | {b:.1f} | {t['new']:.1f} | {t['new'] / b:.2f} | "
              f"{t['no_attention'] / b:.2f} | {t['no_pack'] / b:.2f} |", flush=True)


if __name__ == "__main__":
    main()
