"""The validation layer: each rule table-tested with values the consumer accepts and values it must refuse."""
from __future__ import annotations

import pytest

from tfdist import validate
from tfdist.errors import UsageError
from tfdist.status import ExitStatus

ACCEPTED = [
    (validate.dns_label, "digits"), (validate.dns_label, "a"), (validate.dns_label, "0a-b9"),
    (validate.dns_label, "a" * 63),
    (validate.dns_subdomain, "ckpt"), (validate.dns_subdomain, "a.b-c.d"), (validate.dns_subdomain, "a" * 253),
    (validate.slurm_job_name, "digits.v2_run-1"), (validate.slurm_job_name, "x" * 64),
    (validate.slurm_partition, "gpu"), (validate.slurm_partition, "gpu,gpu-long"),
    (validate.slurm_time, "30"), (validate.slurm_time, "30:00"), (validate.slurm_time, "04:00:00"),
    (validate.slurm_time, "2-12"), (validate.slurm_time, "2-12:30"), (validate.slurm_time, "2-12:30:00"),
    (validate.slurm_time, "UNLIMITED"),
    (validate.version, "2.21"), (validate.version, "2.21.0"), (validate.version, "2.21.0rc1"),
    (validate.image_reference, "tfdist-tf2.21-gpu"), (validate.image_reference, "registry:5000/team/digits:1"),
    (validate.image_reference, "nvcr.io/nvidia/tensorflow:24.01-tf2-py3"),
    (validate.image_reference, "[fd00::1]:5000/x:latest"), (validate.image_reference, "a/b__c/d-e.f:" + "t" * 128),
    (validate.image_reference, "busybox@sha256:" + "0" * 64),
    (validate.url, "https://host/simple"), (validate.url, "http://u:p@[fd00::5]:8089/simple/"),
    (validate.url, "https://127.0.0.1:65535/x?y=1#z"), (validate.url, "https://h_a.b/%20"),
    (validate.file_name, "setup gpu é.sh"), (validate.file_name, "x" * 255),
    (validate.path_text, "a b/c'd/$(x)"),
    (validate.one_line, "tabs are not here; quotes ' \" ` $() # are"),
]

REFUSED = [
    (validate.dns_label, "digits\n"), (validate.dns_label, "\ndigits"), (validate.dns_label, "Digits"),
    (validate.dns_label, "-a"), (validate.dns_label, "a-"), (validate.dns_label, "a" * 64), (validate.dns_label, ""),
    (validate.dns_label, "a.b"), (validate.dns_label, "dígits"),
    (validate.dns_subdomain, "a..b"), (validate.dns_subdomain, "a" * 254), (validate.dns_subdomain, "ckpt\n"),
    (validate.dns_subdomain, ".a"),
    (validate.slurm_job_name, "job\n"), (validate.slurm_job_name, "a b"), (validate.slurm_job_name, "x" * 65),
    (validate.slurm_job_name, "٣"),
    (validate.slurm_partition, "gpu --exclusive --uid=0"), (validate.slurm_partition, "gpu\n"),
    (validate.slurm_partition, "gpu,"), (validate.slurm_partition, ""),
    (validate.slurm_time, "04:00:00\n"), (validate.slurm_time, "1:2:3:4"), (validate.slurm_time, "a"),
    (validate.slurm_time, "٠٤:00"), (validate.slurm_time, " 30"),
    (validate.version, "\n2.21"), (validate.version, "2.21\n"), (validate.version, "v2.21"),
    (validate.version, "2.21 "),
    (validate.image_reference, "t\nRUN id"), (validate.image_reference, "team/Upper"),
    (validate.image_reference, "x:" + "t" * 129), (validate.image_reference, "x:-tag"),
    (validate.image_reference, "x y"), (validate.image_reference, "busybox@sha256:short"),
    (validate.image_reference, "a" * 256),
    (validate.url, "x=https://good/simple\nextra-index-url = https://evil/simple"),
    (validate.url, "https://h/sim\tple"), (validate.url, "https://h/\r"), (validate.url, "https://[zz]/simple"),
    (validate.url, "https://h:65536/simple"), (validate.url, "https://h:0/"), (validate.url, "https://h:/"),
    (validate.url, 'https://h/"x'), (validate.url, "https://h/'x"), (validate.url, "https://h/`x`"),
    (validate.url, "ftp://h/"), (validate.url, "https:///path"), (validate.url, "https://h..x/"),
    (validate.url, "https://h/é"), (validate.url, "https://h/" + "x" * 2048),
    (validate.file_name, "a/b"), (validate.file_name, ".."), (validate.file_name, "x\ntouch F #.sh"),
    (validate.file_name, "x" * 256), (validate.file_name, "\0"), (validate.file_name, "a\u202eb"),
    (validate.path_text, "a\rb"), (validate.path_text, "a/" + "x" * 256),
    (validate.one_line, "a\nb"), (validate.one_line, "a\u2028b"), (validate.one_line, "a\x7f"),
    (validate.one_line, "x" * 4097), (validate.one_line, ""),
]


@pytest.mark.parametrize(("rule", "value"), ACCEPTED, ids=lambda x: getattr(x, "__name__", None))
def test_accepted_values_come_back_unchanged(rule, value: str) -> None:
    assert rule(value, "--flag") == value


@pytest.mark.parametrize(("rule", "value"), REFUSED, ids=lambda x: getattr(x, "__name__", None))
def test_refused_values_name_the_flag_on_one_line_with_exit_2(rule, value: str) -> None:
    with pytest.raises(UsageError) as caught:
        rule(value, "--the-flag")
    line = caught.value.one_line()
    assert line.startswith("--the-flag ")
    assert "\n" not in line and "\r" not in line and "\0" not in line
    assert len(line) < 400  # a 10 kB value is cut in the message
    assert caught.value.status == ExitStatus.USAGE == 2


def test_dns_label_can_be_tighter_than_63() -> None:
    assert validate.dns_label("a" * 40, "--name", max_length=40)
    with pytest.raises(UsageError, match="40"):
        validate.dns_label("a" * 41, "--name", max_length=40)


def test_outer_space_is_refused_only_when_asked() -> None:
    assert validate.one_line(" a ", "--x") == " a "
    with pytest.raises(UsageError, match="white space"):
        validate.one_line(" a", "--x", allow_outer_space=False)
