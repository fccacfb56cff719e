"""One registry per axis: the spec's valid names are the registered ones, and a part's
parameter keys are its constructor's keywords minus what the builder supplies."""
from __future__ import annotations

import pytest

from tfamily import members, registry
from tfamily.registry import Registry
from tfamily.spec import Spec


def test_spec_accepts_exactly_the_registered_names():
    for axis, field_ in (("pattern", "pattern"), ("kernel", "kernel"), ("position", "position"),
                         ("residual", "residual"), ("depth", "depth"), ("state", "state"), ("ff", "ff")):
        reg = registry.AXES[axis]
        assert len(reg) > 0
        with pytest.raises(ValueError, match=f"unknown {axis} 'nope'; valid choices: " + ", ".join(reg.names())):
            members.gpt(**{field_: {"name": "nope"}})
    with pytest.raises(ValueError, match="unknown model 'nope'; valid choices: classifier, decoder, dual_encoder, encoder, "
                                         "encoder_decoder"):
        members.gpt(model="nope")


def test_a_new_registration_is_a_valid_spec_choice():
    # A part registered anywhere becomes a valid choice with no edit to spec/__init__.py.
    with pytest.raises(ValueError, match="unknown residual 'scaled'"):
        members.gpt(residual={"name": "scaled"})
    from tfamily.nn.residual import PreNorm

    def scaled(d_model, dropout):
        return PreNorm(d_model, dropout)
    registry.RESIDUALS.register("scaled", scaled, needs=("d_model", "dropout"), final_norm=True)
    try:
        spec = members.gpt(residual={"name": "scaled"}, d_model=16, depth__n_layers=1, heads__n_heads=2)
        assert spec.residual.name == "scaled"
        import tfamily
        tfamily.build(spec)
    finally:
        registry.RESIDUALS._entries.pop("scaled")


def test_registry_refuses_a_second_part_under_one_name_and_bad_names():
    reg = Registry("toy")
    reg.register("a", dict)
    reg.register("a", dict)  # the same part again (a module reloaded) is harmless
    with pytest.raises(ValueError, match="'a' is already registered"):
        reg.register("a", list)
    with pytest.raises(TypeError, match="toy must be a string naming a choice, got 3; valid: a"):
        reg.check(3)


def test_params_are_the_constructor_keywords_minus_what_the_builder_supplies():
    reg = Registry("toy")

    def part(d_model, *, width=3, depth=2):
        return (d_model, width, depth)
    reg.register("p", part, needs=("d_model",))
    assert reg.valid_params("p") == ("width", "depth")
    assert reg.make("p", {"width": 5}, d_model=8) == (8, 5, 2)
    with pytest.raises(ValueError, match=r"unknown toy.params \['height'\] for toy 'p'; valid keys: width, depth"):
        reg.make("p", {"height": 1}, d_model=8)
    with pytest.raises(TypeError, match="toy.params must be a dict"):
        reg.check_params("p", [1])


def test_heads_registry_builds_the_projection_the_spec_names():
    spec = members.reformer(d_model=32, depth__n_layers=2, heads__n_heads=2, vocab_size=16)
    import tfamily
    from tfamily.nn.heads import SharedQKProjection
    model = tfamily.build(spec)
    assert any(isinstance(m, SharedQKProjection) for m in model.modules())
    assert registry.HEADS["shared_qk"] is SharedQKProjection


def test_objectives_declare_the_models_they_train():
    assert {o: registry.OBJECTIVES.entry(o).info["models"] for o in ("causal_lm", "masked_lm", "seq2seq")} == {
        "causal_lm": ("decoder",), "masked_lm": ("encoder",), "seq2seq": ("encoder_decoder",)}
    assert isinstance(Spec(member="x", model="encoder", objective={"name": "masked_lm"}), Spec)
