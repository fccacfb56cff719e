"""The reading tour (``tfamily members NAME``): for every member, each axis names the
classes the built model really uses and a citation, and ``--json`` keeps working."""
from __future__ import annotations

import importlib
import json
import re

import pytest

from tfamily import cli, members
from tfamily.catalogue import tour

AXES = ["model", "embedding", "position", "pattern", "kernel", "heads", "residual", "depth", "state",
        "feed_forward", "objective", "init", "dropout"]


def _resolve(where: str):
    module, _, name = where.rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("name", list(members.REGISTRY))
def test_every_member_tour_covers_every_axis_with_real_classes_and_citations(name, capsys):
    stops = tour.tour(name)
    assert list(dict.fromkeys(s.axis for s in stops)) == AXES
    choices = members.get(name)().choices()
    for s in stops:
        assert _resolve(s.where) is s.cls
        assert re.search(r"\b(19|20)\d\d\b", s.citation), (s.where, s.citation)
        assert tour.cites_itself(s.cls), f"{s.where} declares no citation (tour.Cited)"
        if s.axis in choices:
            assert s.choice == str(choices[s.axis])
    assert cli.main(["members", name]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{name}: {members.REGISTRY[name].paper}\n")
    for s in stops:
        assert f"{s.where}: {s.citation}" in out
    for axis in AXES:
        assert f"  {axis} = " in out


def _classes(stops, axis):
    return [s.cls.__name__ for s in stops if s.axis == axis]


def test_tour_reads_the_built_composition():
    reformer = tour.tour("reformer")
    assert _classes(reformer, "kernel") == ["LSHKernel"]
    assert _classes(reformer, "heads") == ["SharedQKProjection"]
    assert _classes(reformer, "depth") == ["ReversibleStack"]
    assert _classes(reformer, "feed_forward") == ["Chunked", "MLP"]
    span = tour.tour("adaptive_span")
    assert _classes(span, "kernel") == ["SoftPatternKernel", "SDPAKernel"]
    assert _classes(span, "state") == ["SegmentMemory"]
    assert _classes(span, "position") == ["NoPosition", "RelativePosition"]
    assert _classes(tour.tour("sparse_transformer_strided"), "pattern") == ["PerHead", "SlidingWindow",
                                                                            "StridedColumns"]
    assert _classes(tour.tour("bert"), "embedding") == ["TokenEmbedding", "MLMHead", "LMHead"]
    assert _classes(tour.tour("vanilla"), "pattern") == ["Full", "Causal"]  # encoder, then decoder
    # Any spec, not only a preset: changing a choice changes the class the tour names.
    spec = members.gpt(kernel=dict(name="reference"), residual=dict(name="post_norm"))
    assert _classes(tour.tour(spec), "kernel") == ["ReferenceKernel"]
    assert _classes(tour.tour(spec), "residual") == ["PostNorm"]
    sepconv = tour.tour(members.universal_transformer(ff={"name": "sepconv"}))
    assert _classes(sepconv, "feed_forward") == ["SepConvTransition"]
    assert [s.choice for s in sepconv if s.axis == "feed_forward"] == ["sepconv"]


def test_members_json_with_names_adds_the_tour_and_without_names_is_unchanged(capsys):
    assert cli.main(["members", "gpt", "reformer", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == ["gpt", "reformer"]
    for r in rows:
        assert [t["axis"] for t in r["tour"]][0] == "model"
        assert {"axis", "choice", "class", "citation"} == set(r["tour"][0])
    assert cli.main(["members", "--json"]) == 0
    assert all("tour" not in r for r in json.loads(capsys.readouterr().out))


def test_cite_falls_back_to_a_docstring_line_with_a_year():
    class Part:
        """Something new.

        Someone et al. 2031, eq. 9: the rule."""
    assert tour.cite(Part) == "Someone et al. 2031, eq. 9: the rule."


def test_tour_names_each_members_recipe():
    """The input scale, init scheme and dropout sites are named, and differ where the papers do."""
    gpt = {s.axis: s.choice for s in tour.tour("gpt")}
    assert gpt["embedding"] == "tied, unscaled" and gpt["init"].startswith("normal")
    assert gpt["dropout"] == "0.1 on embedding, attention probabilities, sublayer outputs"
    vanilla = {s.axis: s.choice for s in tour.tour("vanilla")}
    assert vanilla["embedding"] == "tied, x sqrt(d_model)" and vanilla["init"] == "torch"
