"""Consumer offset files: fastjson dialect, exact RocketMQ text, .bak fallback, locking, crash safety."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstream.client.offset_store import LocalOffsetStore
from rocketstream.errors import OffsetFileError, OptionError, ReadOnlyStoreError
from rocketstream.store.meta.offsets import (
    ConsumerOffsetManager,
    FrozenObject,
    MessageQueueKey,
    dump_consumer_offsets,
    dump_fastjson,
    dump_local_offsets,
    load_consumer_offset_document,
    load_consumer_offsets,
    load_local_offsets,
    parse_fastjson,
)

# ConsumerOffsetManager.encode(true) in 4.9.8 (TAB indentation, no trailing newline)
SPEC_71 = (
    '{\n\t"offsetTable":{\n'
    '\t\t"TopicTest@group_a":{0:250,1:248,2:251,3:250\n\t\t},\n'
    '\t\t"%RETRY%group_a@group_a":{0:0\n\t\t}\n'
    "\t}\n}"
)
SPEC_71_TABLE = {"TopicTest@group_a": {0: 250, 1: 248, 2: 251, 3: 250}, "%RETRY%group_a@group_a": {0: 0}}

# ConsumerOffsetManager.encode(true) in 5.x
SPEC_5X = (
    '{\n\t"dataVersion":{\n\t\t"counter":1448,\n\t\t"stateVersion":0,\n\t\t"timestamp":1736661762584\n\t},\n'
    '\t"groupTopicMap":{\n\t\t"group_a":["TopicTest","%RETRY%group_a"]\n\t},\n'
    '\t"offsetTable":{\n\t\t"TopicTest@group_a":{0:250,1:248\n\t\t}\n\t}\n}'
)

# LocalFileOffsetStore: a broadcasting consumer's offsets.json
SPEC_74 = (
    '{\n\t"offsetTable":{{\n'
    '\t\t\t"brokerName":"broker-a",\n\t\t\t"queueId":3,\n\t\t\t"topic":"TopicTest"\n'
    "\t\t}:1470,{\n"
    '\t\t\t"brokerName":"broker-a",\n\t\t\t"queueId":2,\n\t\t\t"topic":"TopicTest"\n'
    "\t\t}:1471\n\t}\n}"
)


# ----------------------------------------------------------------------------------------- formats


def test_spec_71_document_round_trips_byte_for_byte() -> None:
    table = load_consumer_offsets(SPEC_71)
    assert table == SPEC_71_TABLE
    assert dump_consumer_offsets(table, sort_keys=False) == SPEC_71


def test_dump_sorts_topic_group_keys_and_queue_ids() -> None:
    shuffled = {"TopicTest@group_a": {3: 250, 1: 248, 0: 250, 2: 251}, "%RETRY%group_a@group_a": {0: 0}}
    expected = (
        '{\n\t"offsetTable":{\n'
        '\t\t"%RETRY%group_a@group_a":{0:0\n\t\t},\n'
        '\t\t"TopicTest@group_a":{0:250,1:248,2:251,3:250\n\t\t}\n'
        "\t}\n}"
    )
    assert dump_consumer_offsets(shuffled) == expected


def test_empty_table_and_empty_queue_map_are_written_as_braces() -> None:
    assert dump_consumer_offsets({}) == '{\n\t"offsetTable":{}\n}'
    assert dump_consumer_offsets({"t@g": {}}) == '{\n\t"offsetTable":{\n\t\t"t@g":{}\n\t}\n}'
    assert load_consumer_offsets('{\n\t"offsetTable":{}\n}') == {}
    assert load_consumer_offsets("{}") == {}


def test_5x_document_loads_offsets_and_data_version_ignoring_group_topic_map() -> None:
    doc = load_consumer_offset_document(SPEC_5X)
    assert doc.table == {"TopicTest@group_a": {0: 250, 1: 248}}
    assert doc.data_version == {"counter": 1448, "stateVersion": 0, "timestamp": 1736661762584}
    text = dump_consumer_offsets(doc.table, data_version=doc.data_version)
    assert text == SPEC_5X.replace('\t"groupTopicMap":{\n\t\t"group_a":["TopicTest","%RETRY%group_a"]\n\t},\n', "")


def test_spec_74_broadcast_document_round_trips_byte_for_byte() -> None:
    offsets = load_local_offsets(SPEC_74)
    assert offsets == {
        MessageQueueKey("TopicTest", "broker-a", 3): 1470,
        MessageQueueKey("TopicTest", "broker-a", 2): 1471,
    }
    assert dump_local_offsets(offsets) == SPEC_74


def test_parser_accepts_fastjson_dialect_with_whitespace_anywhere() -> None:
    text = ' \t{ "a" :\t[ 1 ,-2, 3.5e1 , true,false , null ,"x\\"\\u00e9\\t" ] ,\n 7 : { 8:{ } } , "e":[ ] }\r\n'
    assert parse_fastjson(text) == {"a": [1, -2, 35.0, True, False, None, 'x"é\t'], 7: {8: {}}, "e": []}
    assert parse_fastjson('{{"q":1}:5}') == {FrozenObject({"q": 1}): 5}
    assert parse_fastjson('"\\ud83d\\ude00"') == "\U0001F600"
    assert parse_fastjson(b'\xef\xbb\xbf{"k":1}') == {"k": 1}  # BOM tolerated


def test_quoted_queue_ids_from_standard_json_writers_are_accepted() -> None:
    assert load_consumer_offsets('{"offsetTable":{"t@g":{"0":5,"12":7}}}') == {"t@g": {0: 5, 12: 7}}


def test_strings_with_escapes_survive_dump_and_parse() -> None:
    table = {'t"\\\n\x01é@g': {0: 1}}
    assert load_consumer_offsets(dump_consumer_offsets(table)) == table


# ------------------------------------------------------------------------------ malformed documents

MALFORMED = [
    ("", 0, "empty"),
    ("   ", 3, "empty"),
    ('{"offsetTable":{"t@g":{0:"250"}}}', 25, "offset"),  # string offset
    ('{"offsetTable":{"t@g":{0:2.5}}}', 25, "offset"),
    ('{"offsetTable":{"t@g":{0:true}}}', 25, "offset"),
    ('{"offsetTable":{"t@g":{0:9223372036854775808}}}', 25, "offset"),  # beyond Java long
    ('{"offsetTable":{"t@g":{"x":1}}}', 23, "queue id"),
    ('{"offsetTable":{"t@g":{4294967296:1}}}', 23, "queue id"),
    ('{"offsetTable":{"topicgroup":{0:1}}}', 16, "topic@group"),  # key without '@'
    ('{"offsetTable":{5:{0:1}}}', 16, "topic@group"),
    ('{"offsetTable":{"t@g":[1]}}', 22, "not an object"),
    ('{"offsetTable":[]}', 15, "offsetTable"),
    ("[1,2]", 0, "not an object"),
    ('{"offsetTable":{"t@g":{0:1}}} x', 30, "after the end"),
    ('{"offsetTable":{"t@g":{0:1,}}}', 27, "expected an object key"),
    ('{"offsetTable":{"t@g":{0 1}}}', 25, "':'"),
    ('{"a":"\\q"}', 6, "escape"),  # position of the backslash
    ('{"a":"\\u12G4"}', 6, "\\u"),
    ('{"a":01}', 6, "','"),
    ('{"a":tru}', 5, "unexpected character"),
    ("{" * 200 + "}" * 200, 128, "nesting"),
    ('{"dataVersion":5,"offsetTable":{}}', 15, "dataVersion"),
]


@pytest.mark.parametrize("text, position, words", MALFORMED)
def test_malformed_documents_raise_offset_file_error_with_path_and_position(text, position, words) -> None:
    with pytest.raises(OffsetFileError) as info:
        load_consumer_offsets(text, path="/x/consumerOffset.json")
    assert info.value.path == "/x/consumerOffset.json"
    assert info.value.position == position
    assert words in str(info.value) and "/x/consumerOffset.json" in str(info.value)


def test_invalid_utf8_names_the_byte() -> None:
    with pytest.raises(OffsetFileError) as info:
        load_consumer_offsets(b'{"offsetTable":{"t\xff@g":{0:1}}}', path="f")
    assert info.value.position == 18


@pytest.mark.parametrize("text", [SPEC_71, SPEC_5X])
def test_every_truncation_of_a_document_is_an_offset_file_error(text: str) -> None:
    for cut in range(len(text)):
        with pytest.raises(OffsetFileError) as info:
            load_consumer_offsets(text[:cut], path="p")
        assert info.value.path == "p" and 0 <= info.value.position <= cut


def test_every_truncation_of_a_broadcast_document_is_an_offset_file_error() -> None:
    for cut in range(len(SPEC_74)):
        with pytest.raises(OffsetFileError):
            load_local_offsets(SPEC_74[:cut])


@pytest.mark.parametrize(
    "text",
    [
        '{"offsetTable":{{"brokerName":"b","queueId":1}:5}}',  # no topic
        '{"offsetTable":{{"brokerName":"b","queueId":"1","topic":"t"}:5}}',
        '{"offsetTable":{{"brokerName":"b","queueId":1,"topic":"t"}:"5"}}',
        '{"offsetTable":{"t@g":5}}',
    ],
)
def test_malformed_broadcast_documents(text: str) -> None:
    with pytest.raises(OffsetFileError) as info:
        load_local_offsets(text, path="o.json")
    assert info.value.position is not None and info.value.path == "o.json"


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), st.text(alphabet='{}[]:,"\\ \t\n0123456789-.eEtrufalsn@u'), st.binary()))
def test_fuzz_parser_returns_a_value_or_offset_file_error(data) -> None:
    for parse in (parse_fastjson, load_consumer_offsets, load_local_offsets):
        try:
            parse(data, path="fuzz")
        except OffsetFileError as exc:
            assert exc.path == "fuzz" and exc.position is not None


names = st.text(min_size=1, max_size=12).filter(lambda s: "@" not in s)
tables = st.dictionaries(
    st.builds(lambda t, g: f"{t}@{g}", names, st.text(min_size=1, max_size=12)),
    st.dictionaries(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1), max_size=5),
    max_size=5,
)


@settings(max_examples=150, deadline=None)
@given(tables)
def test_any_table_round_trips(table) -> None:
    assert load_consumer_offsets(dump_consumer_offsets(table)) == table


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text() | st.integers(), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(json_values)
def test_printer_and_parser_agree_on_any_value(value) -> None:
    assert parse_fastjson(dump_fastjson(value)) == value


# ----------------------------------------------------------------------------- ConsumerOffsetManager


def _config(root: Path) -> Path:
    (root / "config").mkdir(parents=True, exist_ok=True)
    return root / "config"


def test_commit_query_and_file_text(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(tmp_path)
    assert m.query_offset("g", "T", 0) == -1 and m.table() == {} and m.groups() == []
    m.commit("group_a", "TopicTest", {3: 250, 0: 250, 1: 248, 2: 251})
    m.commit("group_a", "%RETRY%group_a", {0: 0})
    assert (tmp_path / "config" / "consumerOffset.json").read_text() == dump_consumer_offsets(SPEC_71_TABLE)
    assert m.query_offset("group_a", "TopicTest", 1) == 248
    assert m.query_offset("group_a", "TopicTest", 9) == -1
    assert m.offsets_of("group_a", "TopicTest") == {0: 250, 1: 248, 2: 251, 3: 250}
    assert m.groups() == ["group_a"] and m.topics_of("group_a") == ["%RETRY%group_a", "TopicTest"]
    m.commit("group_a", "TopicTest", {1: 100})  # lower than stored: accepted, as the broker does
    assert m.offsets_of("group_a", "TopicTest") == {0: 250, 1: 100, 2: 251, 3: 250}
    m.remove_group("group_a")
    assert m.table() == {}


def test_commit_keeps_the_previous_file_as_bak(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(tmp_path)
    m.commit("g", "T", {0: 1})
    first = m.path.read_bytes()
    m.commit("g", "T", {0: 2})
    assert m.bak_path.read_bytes() == first
    assert load_consumer_offsets(m.path.read_bytes()) == {"T@g": {0: 2}}


def test_three_part_broadcast_keys_are_preserved_on_rewrite(tmp_path: Path) -> None:
    (_config(tmp_path) / "consumerOffset.json").write_text(
        dump_consumer_offsets({"T@g@broadcast": {0: 7}, "T@g": {0: 1}})
    )
    m = ConsumerOffsetManager(tmp_path)
    m.commit("other", "T", {0: 3})
    m.remove_group("g")  # RocketMQ's removeOffset only matches two-part keys
    assert m.table() == {"T@g@broadcast": {0: 7}, "T@other": {0: 3}}
    assert m.query_offset("g@broadcast", "T", 0) == 7
    assert m.groups() == ["g@broadcast", "other"]


def test_5x_document_keeps_data_version_and_advances_its_counter(tmp_path: Path) -> None:
    (_config(tmp_path) / "consumerOffset.json").write_text(SPEC_5X)
    m = ConsumerOffsetManager(tmp_path)
    m.commit("group_a", "TopicTest", {0: 300})
    doc = load_consumer_offset_document(m.path.read_text())
    assert doc.table == {"TopicTest@group_a": {0: 300, 1: 248}}
    assert doc.data_version["counter"] == 1449 and doc.data_version["stateVersion"] == 0
    assert "groupTopicMap" not in m.path.read_text()


@pytest.mark.parametrize("main", [None, b"", b"  \n", b'{"offsetTable":{"T@g":{0:', b"\x00" * 64])
def test_load_falls_back_to_bak_when_main_is_missing_empty_or_corrupt(tmp_path: Path, main) -> None:
    config = _config(tmp_path)
    (config / "consumerOffset.json.bak").write_text(dump_consumer_offsets({"T@g": {0: 5}}))
    if main is not None:
        (config / "consumerOffset.json").write_bytes(main)
    m = ConsumerOffsetManager(tmp_path)
    assert m.query_offset("g", "T", 0) == 5
    m.commit("g", "T", {1: 6})  # heals the main file from the backup
    assert load_consumer_offsets(m.path.read_bytes()) == {"T@g": {0: 5, 1: 6}}


def test_corrupt_main_and_no_bak_is_an_error_not_an_empty_table(tmp_path: Path) -> None:
    (_config(tmp_path) / "consumerOffset.json").write_text('{"offsetTable":{"T@g":{0:"x"}}}')
    m = ConsumerOffsetManager(tmp_path)
    with pytest.raises(OffsetFileError) as info:
        m.table()
    assert info.value.path == str(m.path) and info.value.position == 25
    with pytest.raises(OffsetFileError):
        m.commit("g", "T", {0: 1})  # never overwrite offsets we could not read
    assert m.path.read_text() == '{"offsetTable":{"T@g":{0:"x"}}}'


def test_corrupt_main_and_corrupt_bak_names_the_main_file(tmp_path: Path) -> None:
    config = _config(tmp_path)
    (config / "consumerOffset.json").write_text("{oops")
    (config / "consumerOffset.json.bak").write_text("{")
    with pytest.raises(OffsetFileError) as info:
        ConsumerOffsetManager(tmp_path).table()
    assert info.value.path == str(config / "consumerOffset.json") and info.value.position == 1
    assert "backup" in str(info.value)


def test_read_only_refuses_commits_and_creates_nothing(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(tmp_path / "store", read_only=True)
    assert m.table() == {} and m.query_offset("g", "T", 0) == -1
    with pytest.raises(ReadOnlyStoreError):
        m.commit("g", "T", {0: 1})
    with pytest.raises(ReadOnlyStoreError):
        m.remove_group("g")
    assert not (tmp_path / "store").exists()


def test_bad_arguments_are_option_errors(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(tmp_path)
    for group, topic, offsets in [("g", "a@b", {0: 1}), ("", "T", {0: 1}), ("g", "T", {0: "1"}),
                                  ("g", "T", {0: 2**63}), ("g", "T", {True: 1}), ("g", "T", {0: 1.5})]:
        with pytest.raises(OptionError):
            m.commit(group, topic, offsets)
    assert not m.path.exists()


def _commit_worker(root: str, worker: int, count: int) -> None:
    m = ConsumerOffsetManager(Path(root))
    for i in range(count):  # every commit adds a new queue, so any lost update is visible
        m.commit(f"group{worker % 2}", "T", {worker * 1000 + i: i})


def test_concurrent_commits_from_processes_lose_no_updates(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_commit_worker, args=(str(tmp_path), w, 50)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    table = ConsumerOffsetManager(tmp_path).table()
    for w in range(4):
        assert {q: o for q, o in table[f"T@group{w % 2}"].items() if q // 1000 == w} == {
            w * 1000 + i: i for i in range(50)
        }


# SIGKILL during commits (old or new table, .bak whole, next commit works): the campaign in
# tests/reliability/test_crash_offsets.py (8 kills in the default run, 80 with -m slow).


# ----------------------------------------------------------------------------------- LocalOffsetStore


def test_local_offset_store_path_format_and_overlay(tmp_path: Path) -> None:
    store = LocalOffsetStore(tmp_path, "10.0.0.1@DEFAULT", "cg")
    assert store.path == tmp_path / "10.0.0.1@DEFAULT" / "cg" / "offsets.json"
    assert store.read() == {} and store.read_offset(("TopicTest", "broker-a", 2)) == -1
    store.persist({MessageQueueKey("TopicTest", "broker-a", 3): 1470, ("TopicTest", "broker-a", 2): 1471})
    text = store.path.read_text()
    assert load_local_offsets(text) == load_local_offsets(SPEC_74)
    assert text == dump_local_offsets(dict(sorted(load_local_offsets(SPEC_74).items())))
    store.persist({("TopicTest", "broker-a", 2): 1500})  # queue 3 not given: kept
    assert store.read() == {
        MessageQueueKey("TopicTest", "broker-a", 2): 1500,
        MessageQueueKey("TopicTest", "broker-a", 3): 1470,
    }
    assert load_local_offsets(store.path.with_name("offsets.json.bak").read_text())[
        MessageQueueKey("TopicTest", "broker-a", 2)
    ] == 1471


def test_local_offset_store_reads_java_written_file_and_falls_back_to_bak(tmp_path: Path) -> None:
    store = LocalOffsetStore(tmp_path, "ip@DEFAULT", "cg")
    store.path.parent.mkdir(parents=True)
    store.path.write_text(SPEC_74)
    assert store.read_offset(MessageQueueKey("TopicTest", "broker-a", 3)) == 1470
    store.path.with_name("offsets.json.bak").write_text(SPEC_74)
    store.path.write_text(SPEC_74[:40])
    assert store.read_offset(MessageQueueKey("TopicTest", "broker-a", 2)) == 1471
    store.path.with_name("offsets.json.bak").write_text("{")
    with pytest.raises(OffsetFileError) as info:
        store.read()
    assert info.value.path == str(store.path)
