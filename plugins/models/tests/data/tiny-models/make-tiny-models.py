"""Make tiny randomly initialised models in the Hugging Face / sentence-transformers on-disk layouts that
real hub models use, and the outputs that sentence-transformers and transformers (torch, CPU, float32)
compute for them. They stand in for bge / e5 / gte / all-mpnet / multilingual-e5 / ms-marco / bge-reranker,
which cannot be downloaded here: same file layout, same architectures, same pooling and head code paths.

Usage: python make-tiny-models.py OUT_DIR SEED   (needs torch, transformers, sentence-transformers, tokenizers)
Writes OUT_DIR/<name>/ (the model folder) and OUT_DIR/reference.json (texts, pairs, vectors, scores).
"""

import json
import os
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
import numpy as np
import torch
from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    BertModel,
    BertTokenizerFast,
    MPNetConfig,
    MPNetModel,
    MPNetTokenizerFast,
    XLMRobertaConfig,
    XLMRobertaForSequenceClassification,
    XLMRobertaModel,
    XLMRobertaTokenizerFast,
)

out, seed = Path(sys.argv[1]), int(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(seed)

CORPUS = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The stock market fell sharply today.",
    "What is the capital of France?",
    "Paris is the capital and most populous city of France.",
    "Berlin is the capital of Germany.",
    "The quick brown fox jumps over the lazy dog.",
    "Residency supervisors decide which worker may hold which compiled shape of a model.",
    "Das ist ein deutscher Satz über Maschinen und Modelle.",
    "Le chat dort sur le canapé depuis ce matin.",
    "東京は日本の首都です。",
    "Emoji test 🚀🔥 with symbols: ∑ ∫ √ ≠ ≤",
    "numbers 1234567890 and 3.14159 and 2,718",
    "UPPER CASE and lower case and MiXeD CaSe",
    "How do I reset my password?",
    "Click 'Forgot password' on the sign-in page and follow the email link.",
    "Rerankers score a query against each document together; bi-encoders embed them apart.",
    "El rápido zorro marrón salta sobre el perro perezoso.",
    "Python 3.13 removed several deprecated modules.",
] * 20


def wordpiece(vocab_size, specials, lowercase=True):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]" if "[UNK]" in specials else "<unk>"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(
        CORPUS, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials)
    )
    tok.decoder = decoders.WordPiece()
    return tok


def unigram(vocab_size):
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    tok.train_from_iterator(
        CORPUS,
        trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=specials, unk_token="<unk>"),
    )
    tok.decoder = decoders.Metaspace()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>",
        pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))],
    )
    return tok


def bert_tokenizer(max_len):
    t = wordpiece(600 + int(rng.integers(0, 200)), ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    t.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", t.token_to_id("[CLS]")), ("[SEP]", t.token_to_id("[SEP]"))],
    )
    return BertTokenizerFast(
        tokenizer_object=t,
        model_max_length=max_len,
        unk_token="[UNK]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        mask_token="[MASK]",
    )


def mpnet_tokenizer(max_len):
    t = wordpiece(600 + int(rng.integers(0, 200)), ["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    t.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>",
        pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", t.token_to_id("<s>")), ("</s>", t.token_to_id("</s>"))],
    )
    return MPNetTokenizerFast(
        tokenizer_object=t,
        model_max_length=max_len,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
    )


def xlmr_tokenizer(max_len):
    return XLMRobertaTokenizerFast(
        tokenizer_object=unigram(500 + int(rng.integers(0, 200))),
        model_max_length=max_len,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
    )


def dims():
    heads = int(rng.choice([2, 4]))
    hidden = heads * int(rng.choice([8, 16]))
    return dict(
        hidden_size=hidden,
        num_hidden_layers=int(rng.integers(2, 4)),
        num_attention_heads=heads,
        intermediate_size=hidden * 2,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )


def randomise(model):
    torch.manual_seed(int(rng.integers(0, 2**31)))
    with torch.no_grad():
        for (
            name,
            p,
        ) in model.named_parameters():  # non-trivial weights everywhere, incl. LayerNorm and biases
            if "LayerNorm.weight" in name or "layer_norm.weight" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))
    return model.eval()


def write_st(folder, pooling, normalize, prompts=None, max_seq=128):
    mods = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {
            "idx": 1,
            "name": "1",
            "path": "1_Pooling",
            "type": "sentence_transformers.models.Pooling",
        },
    ]
    if normalize:
        mods.append(
            {
                "idx": 2,
                "name": "2",
                "path": "2_Normalize",
                "type": "sentence_transformers.models.Normalize",
            }
        )
        (folder / "2_Normalize").mkdir(exist_ok=True)
    (folder / "modules.json").write_text(json.dumps(mods, indent=2))
    (folder / "1_Pooling").mkdir(exist_ok=True)
    dim = json.loads((folder / "config.json").read_text())["hidden_size"]
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps(
            {
                "word_embedding_dimension": dim,
                "pooling_mode_cls_token": pooling == "cls",
                "pooling_mode_mean_tokens": pooling == "mean",
                "pooling_mode_max_tokens": False,
                "pooling_mode_mean_sqrt_len_tokens": False,
                "pooling_mode_weightedmean_tokens": False,
                "pooling_mode_lasttoken": False,
                "include_prompt": True,
            },
            indent=2,
        )
    )
    (folder / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": max_seq, "do_lower_case": False})
    )
    st = {
        "__version__": {"sentence_transformers": "3.0.1"},
        "prompts": prompts or {},
        "default_prompt_name": None,
    }
    (folder / "config_sentence_transformers.json").write_text(json.dumps(st, indent=2))


TEXTS = [
    "hello world",
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The stock market fell sharply today.",
    "What is the capital of France?",
    "Das ist ein deutscher Satz über Maschinen.",
    "東京は日本の首都です。",
    "Emoji 🚀 ∑ ≠",
    "a",
    "   leading and trailing spaces   ",
    "Le chat dort sur le canapé.",
    " ".join(["Residency supervisors decide which worker may hold which compiled shape."] * 6),
]
PAIRS = [
    ("What is the capital of France?", "Paris is the capital and most populous city of France."),
    ("What is the capital of France?", "Berlin is the capital of Germany."),
    ("How do I reset my password?", "Click 'Forgot password' on the sign-in page."),
    ("How do I reset my password?", "The quick brown fox jumps over the lazy dog."),
    ("a", "b"),
    ("Emoji 🚀", "東京は日本の首都です。"),
]

ref = {"generator": "make-tiny-models.py", "seed": seed, "torch": torch.__version__, "models": {}}


def embedder(name, make_tok, cfg_cls, model_cls, pooling, normalize, prompts=None, extra=None):
    folder = out / name
    folder.mkdir(exist_ok=True)
    max_len = 128
    tok = make_tok(max_len)
    cfg = cfg_cls(
        vocab_size=len(tok),
        max_position_embeddings=max_len + 2 + (2 if cfg_cls is not BertConfig else 0),
        **dims(),
        **(extra or {}),
    )
    if cfg_cls is not BertConfig:
        cfg.pad_token_id = tok.pad_token_id
        cfg.bos_token_id, cfg.eos_token_id = tok.bos_token_id, tok.eos_token_id
    model = randomise(model_cls(cfg))
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    write_st(folder, pooling, normalize, prompts, max_seq=max_len)
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(folder), device="cpu")
    entry = {
        "kind": "embed",
        "architecture": model_cls.__name__,
        "pooling": pooling,
        "normalize": normalize,
        "dims": cfg.hidden_size,
        "max_tokens": max_len,
        "texts": TEXTS,
        "tokens": [len(tok(t)["input_ids"]) for t in TEXTS],
        "vectors": st.encode(TEXTS, batch_size=4, convert_to_numpy=True).astype(float).tolist(),
    }
    if prompts:
        entry["prompts"] = prompts
        entry["prompted"] = {
            p: st.encode(TEXTS[:4], prompt_name=p, convert_to_numpy=True).astype(float).tolist()
            for p in prompts
        }
    ref["models"][name] = entry


def cross_encoder(name, make_tok, cfg_cls, model_cls):
    folder = out / name
    folder.mkdir(exist_ok=True)
    max_len = 128
    tok = make_tok(max_len)
    cfg = cfg_cls(
        vocab_size=len(tok),
        max_position_embeddings=max_len + 2 + (2 if cfg_cls is not BertConfig else 0),
        num_labels=1,
        **dims(),
    )
    if cfg_cls is not BertConfig:
        cfg.pad_token_id = tok.pad_token_id
        cfg.bos_token_id, cfg.eos_token_id = tok.bos_token_id, tok.eos_token_id
    model = randomise(model_cls(cfg))
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    enc = tok(
        [q for q, _ in PAIRS],
        [d for _, d in PAIRS],
        padding=True,
        truncation=True,
        return_tensors="pt",
    )
    with torch.no_grad():
        logits = model(**enc).logits[:, 0].double()
    ref["models"][name] = {
        "kind": "rerank",
        "architecture": model_cls.__name__,
        "max_tokens": max_len,
        "pairs": PAIRS,
        "pair_tokens": [len(tok(q, d)["input_ids"]) for q, d in PAIRS],
        "raw_scores": logits.tolist(),
        "scores": torch.sigmoid(logits).tolist(),
    }


embedder("bert-cls", bert_tokenizer, BertConfig, BertModel, "cls", True)  # bge-style
embedder(
    "bert-mean-raw", bert_tokenizer, BertConfig, BertModel, "mean", False
)  # no Normalize module
embedder(
    "xlmr-mean",
    xlmr_tokenizer,
    XLMRobertaConfig,
    XLMRobertaModel,
    "mean",
    True,
    prompts={"query": "query: ", "passage": "passage: "},
)  # multilingual-e5-style
embedder(
    "mpnet-mean",
    mpnet_tokenizer,
    MPNetConfig,
    MPNetModel,
    "mean",
    True,
    extra={"relative_attention_num_buckets": 32},
)  # all-mpnet-base-v2-style
cross_encoder(
    "bert-rerank", bert_tokenizer, BertConfig, BertForSequenceClassification
)  # ms-marco-style
cross_encoder(
    "xlmr-rerank", xlmr_tokenizer, XLMRobertaConfig, XLMRobertaForSequenceClassification
)  # bge-reranker
(out / "reference.json").write_text(json.dumps(ref, indent=1))
print("wrote", out, {k: v["architecture"] for k, v in ref["models"].items()})
