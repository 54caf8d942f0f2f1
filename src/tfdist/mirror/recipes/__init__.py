"""Per-tool recipes (as chsrc has one per target): everything tfdist knows about one package tool, in one object.

A recipe answers, for its tool: which file each scope means (:meth:`Recipe.target`), whether a mirror applies
(:meth:`Recipe.skip_reason`), how to edit that file (:meth:`Recipe.edit`), which index each real command of the
tool will use and where that comes from (:meth:`Recipe.effective`), what the tool itself says
(:meth:`Recipe.ask_tool`), what to run afterwards (:meth:`Recipe.followups`) and which environment variables select
a mirror (:meth:`Recipe.environment`). Adding a tool is adding one module here and one line to :data:`RECIPES`.
"""
from __future__ import annotations

from tfdist.mirror.recipes.base import (
    BUILT_IN, Context, Edit, Effective, Recipe, ToolView, index_environment, same_index)
from tfdist.mirror.recipes.conda import CondaRecipe
from tfdist.mirror.recipes.pip import PipRecipe
from tfdist.mirror.recipes.uv import UvRecipe

__all__ = ["BUILT_IN", "RECIPES", "Context", "Edit", "Effective", "Recipe", "ToolView", "index_environment",
           "same_index"]

RECIPES: dict[str, Recipe] = {"pip": PipRecipe(), "uv": UvRecipe(), "conda": CondaRecipe()}
