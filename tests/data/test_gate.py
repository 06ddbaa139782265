"""The output gate: an output that is one of the command's inputs (through a link), a file where a folder is asked
for and the reverse, and an existing output without --overwrite or --resume are refused before any work."""

import pytest

from mia_fast.data.gate import Output, check_outputs
from mia_fast.errors import MiaFastError


def test_an_output_over_an_input_is_refused_through_links(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text("{}\n")
    (tmp_path / "link.jsonl").symlink_to(data)
    with pytest.raises(MiaFastError, match="is the input .*d.jsonl: writing it would destroy the input"):
        check_outputs([Output(tmp_path / "link.jsonl")], [data], overwrite=True)
    (tmp_path / "x.jsonl.partial").mkdir()
    with pytest.raises(MiaFastError, match=r"\(its stage .*\) is the input"):
        check_outputs([Output(tmp_path / "x.jsonl", staged=True)], [tmp_path / "x.jsonl.partial"], overwrite=True)
    report = tmp_path / "report"
    report.mkdir()
    (report / "d.jsonl").write_text("{}\n")
    with pytest.raises(MiaFastError, match="holds the input .*which the report's files could replace"):
        check_outputs([Output(report, "--report", folder=True)], [report / "d.jsonl"], overwrite=True)


def test_a_file_output_is_not_a_folder_and_a_folder_output_not_a_file(tmp_path):
    (tmp_path / "dir.jsonl").mkdir()
    with pytest.raises(MiaFastError, match="--out .*dir.jsonl is a folder; --out names a file"):
        check_outputs([Output(tmp_path / "dir.jsonl")], [])
    (tmp_path / "file").write_text("x")
    with pytest.raises(MiaFastError, match="--report .*file is a file; --report names a folder to write into"):
        check_outputs([Output(tmp_path / "file", "--report", folder=True)], [])
    with pytest.raises(MiaFastError, match="cannot write .*: .*file is a file, not a folder"):
        check_outputs([Output(tmp_path / "file" / "o.jsonl")], [])


def test_what_exists_is_kept_unless_overwritten_or_resumed(tmp_path):
    out = tmp_path / "o.jsonl"
    out.write_text("{}\n")
    with pytest.raises(MiaFastError, match="o.jsonl exists; pass --overwrite to replace it"):
        check_outputs([Output(out)], [])
    with pytest.raises(MiaFastError, match="o.jsonl exists; pass --resume to continue it or --overwrite to replace"):
        check_outputs([Output(out, resumable=True)], [])
    check_outputs([Output(out, resumable=True)], [], resume=True)
    check_outputs([Output(out)], [], overwrite=True)
    with pytest.raises(MiaFastError, match="--resume and --overwrite exclude each other"):
        check_outputs([Output(out)], [], overwrite=True, resume=True)
    report = tmp_path / "report"
    report.mkdir()
    (report / "old.md").write_text("x")
    with pytest.raises(MiaFastError, match="report is not empty; pass --overwrite or --resume to continue it"):
        check_outputs([Output(report, "--report", folder=True, resumable=True)], [])
