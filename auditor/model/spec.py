"""ModelSpec: the structural facts of a model, detected from config keys (never from model_type).

Both the memory ledger and the performance model start from this one object. Field names
follow the notation of the engine spec (H, NH, Qr, Lkv, Dn, Dr, Dv, IH, ID, E, I, Id, V, Lyr, Kd).
"""
from __future__ import annotations

from dataclasses import dataclass, field, asdict


@dataclass(frozen=True)
class LayerKind:
    """What one decoder layer (or MTP layer) is, as its family declares it: the attention kind, the
    window it keeps or the ratio it compresses by, whether it has a lightning indexer, MoE or dense,
    and how its router picks experts. Every walker (classifier, materializer, KV specs, synth) reads
    these instead of asking which model it is."""

    attention: str              # mla | gqa | window (sliding window only) | compressed (window + compressed rows)
    compress_ratio: int = 0     # compressed: one cached row per this many tokens
    window: int = 0             # tokens of the sliding window every layer of this kind keeps (0: none)
    indexer: bool = False       # a lightning indexer picks the top-k compressed rows / tokens
    moe: bool = True
    router: str = "score"       # score (gate logits + bias) | hash (token id -> experts table) | none (dense)
    mtp: bool = False


@dataclass(frozen=True)
class ModelSpec:
    """Dimensions and structure of a decoder-only transformer, MLA/DSA/MoE/MTP aware."""

    name: str
    model_type: str
    H: int                      # hidden_size
    NH: int                     # num_attention_heads
    Lyr: int                    # num_hidden_layers (main model, MTP excluded)
    V: int                      # vocab_size
    pd: str = "BF16"            # model (parameter) dtype, safetensors spelling
    # plain attention (non-MLA)
    NKV: int = 0                # num_key_value_heads
    head_dim: int = 0
    # MLA
    mla: bool = False
    Qr: int = 0                 # q_lora_rank (0: q_proj is direct)
    Lkv: int = 0                # kv_lora_rank
    Dn: int = 0                 # qk_nope_head_dim
    Dr: int = 0                 # qk_rope_head_dim
    Dv: int = 0                 # v_head_dim
    # DSA indexer
    dsa: bool = False
    IH: int = 0                 # index_n_heads
    ID: int = 0                 # index_head_dim
    topk_tokens: int = 0        # index_topk (tokens kept by the indexer)
    indexer_layers: tuple[bool, ...] = ()   # per main layer: the checkpoint has its indexer (not "shared")
    # IndexCache (config ``indexer_types`` / ``index_topk_freq`` / ``index_skip_topk_offset`` /
    # ``index_topk_pattern``): per main layer "full" or "shared" (the checkpoint's indexer kind), and
    # whether the layer reuses the previous full layer's top-k instead of computing its own
    indexer_kinds: tuple[str, ...] = ()
    topk_shared: tuple[bool, ...] = ()
    # MLP / MoE
    Id: int = 0                 # intermediate_size (dense layers)
    moe: bool = False
    E: int = 0                  # n_routed_experts
    I: int = 0                  # moe_intermediate_size
    S: int = 0                  # n_shared_experts
    topk_experts: int = 0       # num_experts_per_tok
    moe_layers: tuple[bool, ...] = ()       # per main layer: MoE (True) or dense (False)
    router_bias: bool = False   # noaux_tc e_score_correction_bias
    # MTP
    mtp_layers: int = 0         # num_nextn_predict_layers
    tie_embeddings: bool = False
    max_position: int = 0
    rope_scaling_factor: float = 1.0
    rope_original_max: int = 0
    indexer_rope_interleave: bool = False
    # per-layer structure (families whose layers differ, e.g. DeepSeek-V4): ``family`` names the module
    # in ``auditor.model.families`` that declares the layers; ``layer_kinds`` covers the main layers and
    # then the MTP layers; ``residual_mult`` is the residual stream's width in units of H between layers
    # (hyper-connections keep hc_mult copies); o_groups / o_lora_rank: a grouped low-rank output projection
    family: str = "mla"
    layer_kinds: tuple[LayerKind, ...] = ()
    residual_mult: int = 1
    o_groups: int = 0
    o_lora_rank: int = 0
    sliding_window: int = 0
    expert_dtype: str = ""      # the HF release's routed-expert format (DeepSeek-V4: "fp4"; "": as the linears)
    # the checkpoint's drafter: "mtp" (num_nextn_predict_layers MTP layers) or "dspark" (DeepSeek-V4's
    # DSpark block drafter: ``mtp_layers`` = dspark_num_mtp_layers, its hidden input the target layers
    # ``drafter_targets``, a Markov head of rank ``markov_rank``)
    drafter: str = "mtp"
    drafter_targets: tuple[int, ...] = ()
    markov_rank: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def Dq(self) -> int:
        return self.Dn + self.Dr

    @property
    def Kd(self) -> int:
        """Number of leading dense layers."""
        n = 0
        for is_moe in self.moe_layers:
            if is_moe:
                break
            n += 1
        return n

    @property
    def n_moe_layers(self) -> int:
        return sum(self.moe_layers)

    @property
    def V_padded(self) -> int:
        """Vocab rounded up to 64, as VocabParallelEmbedding pads it."""
        return -(-self.V // 64) * 64

    def layer_is_moe(self, layer: int) -> bool:
        """MTP layers (index >= Lyr) are MoE layers when the model is MoE."""
        if layer >= self.Lyr:
            return self.moe
        return self.moe_layers[layer]

    def layer_has_indexer(self, layer: int, index_cache: bool = True) -> bool:
        """The layer holds indexer weights and an indexer cache. With the engine's IndexCache
        (``index_cache``) a layer drops its Indexer only when its top-k is shared **and** the
        checkpoint marks it "shared" (vllm-ascend ``patch/worker/patch_deepseek_v2.py:36-54``
        ``_should_skip_indexer_init``@182b75ea); MTP layers always keep one. Without it every layer
        builds its indexer."""
        if not self.dsa:
            return False
        if self.layer_kinds:
            return layer < len(self.layer_kinds) and self.layer_kinds[layer].indexer
        if layer >= self.Lyr or not index_cache:
            return True
        kinds, shared = self.indexer_kinds, self.topk_shared
        if not kinds or not shared:
            return self.indexer_layers[layer] if self.indexer_layers else True
        return not (shared[layer] and kinds[layer] == "shared")

    def layer_computes_topk(self, layer: int, index_cache: bool = True) -> bool:
        """The layer runs its own indexer score + top-k (``_skip_topk``, ``patch_deepseek_v2.py:199-227``
        @182b75ea: ``max(layer - offset + 1, 0) % freq != 0`` skips); without IndexCache every layer does."""
        if not self.dsa:
            return False
        if layer >= self.Lyr or not index_cache or not self.topk_shared:
            return True
        return not self.topk_shared[layer]

    def layer_kind(self, layer: int) -> LayerKind | None:
        """The family's declaration of ``layer`` (MTP layers after the main ones), or None for
        families that declare no per-layer kinds."""
        return self.layer_kinds[layer] if 0 <= layer < len(self.layer_kinds) else None

    def structure_summary(self) -> list[str]:
        """Human-readable list of detected structures, for report headers."""
        if self.layer_kinds:
            from .families import family
            return family(self.family).structure_summary(self)
        out = []
        if self.mla:
            out.append(f"MLA (q_lora {self.Qr}, kv_lora {self.Lkv}, nope {self.Dn}, rope {self.Dr}, v {self.Dv})")
        else:
            out.append(f"attention ({self.NH} heads, {self.NKV} kv heads, head_dim {self.head_dim})")
        if self.dsa:
            n = sum(self.indexer_layers)
            text = f"DSA indexer ({self.IH}x{self.ID}, top-{self.topk_tokens}, {n}/{self.Lyr} layers"
            if any(self.topk_shared):
                text += f"; IndexCache: {self.Lyr - sum(self.topk_shared)} compute top-k"
            out.append(text + ")")
        if self.moe:
            out.append(f"MoE ({self.E} routed top-{self.topk_experts}, {self.S} shared, "
                       f"{self.Kd} dense + {self.n_moe_layers} MoE layers)")
        else:
            out.append(f"dense MLP ({self.Lyr} layers)")
        if self.mtp_layers:
            out.append(f"MTP ({self.mtp_layers} layer{'s' if self.mtp_layers > 1 else ''})")
        return out

    def to_dict(self) -> dict:
        d = asdict(self)
        d["indexer_layers"] = list(self.indexer_layers)
        d["indexer_kinds"] = list(self.indexer_kinds)
        d["topk_shared"] = list(self.topk_shared)
        d["moe_layers"] = list(self.moe_layers)
        d["notes"] = list(self.notes)
        d["layer_kinds"] = [asdict(k) for k in self.layer_kinds]
        if self.drafter == "mtp":           # an MTP checkpoint's dict is what it was before DSpark
            for k in ("drafter", "drafter_targets", "markov_rank"):
                d.pop(k)
        else:
            d["drafter_targets"] = list(self.drafter_targets)
        return d
