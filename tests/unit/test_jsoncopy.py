"""apiserver/apimachinery/jsoncopy.py: copies of JSON data that share nothing mutable with the original."""

from __future__ import annotations

import datetime

from isthmus.apiserver.apimachinery.jsoncopy import clone, deep_copy


def test_deep_copy_keeps_types_and_shares_no_container() -> None:
    day = datetime.date(2026, 11, 28)  # what a YAML body may decode to
    value = {"a": [{"b": day, "c": 1.0, "d": True}], "e": None, "f": "x"}
    copy = deep_copy(value)
    assert copy == value and copy["a"][0]["b"] is day and type(copy["a"][0]["c"]) is float
    copy["a"][0]["d"] = False
    copy["a"].append(1)
    assert value == {"a": [{"b": day, "c": 1.0, "d": True}], "e": None, "f": "x"}


def test_clone_copies_stored_data_even_past_what_orjson_writes() -> None:
    value = {"spec": {"n": 2**70, "items": [1, 2]}}  # an integer past 64 bits: orjson refuses it
    copy = clone(value)
    assert copy == value and copy["spec"] is not value["spec"] and copy["spec"]["items"] is not value["spec"]["items"]
    plain = {"metadata": {"name": "a"}, "data": {"k": "v"}}
    assert clone(plain) == plain and clone(plain)["data"] is not plain["data"]
