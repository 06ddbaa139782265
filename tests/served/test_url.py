"""A served model's address (served.url): read into an endpoint or refused in one line, shown with its user
part, query values and key masked, and the key's variable told apart from a key pasted in its place. The CLI's
lines for bad URLs: tests/faults/test_run_files_and_urls.py."""

import pytest

from mia_fast.errors import MiaFastError
from mia_fast.served.url import (
    Endpoint,
    endpoint,
    environment_key,
    hide_key,
    key_variable,
    mask_urls,
    masked_url,
)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://user:pw@host:8000/v1?key=abc&flag#frag", "http://***@host:8000/v1?key=***&***#***"),
        ("host:8000/path?token=1", "host:8000/path?token=***"),
        ("https://host/v1", "https://host/v1"),
        ("ht!tp://user@host", "ht!tp://***@host"),
    ],
)
def test_a_url_is_shown_with_its_user_part_and_query_values_masked(url, expected):
    assert masked_url(url) == expected


def test_every_url_in_a_line_is_masked_and_the_rest_kept():
    assert mask_urls("see http://a@b/x?k=v and https://c/d.") == "see http://***@b/x?k=*** and https://c/d."
    assert mask_urls("no address here") == "no address here"


def test_the_key_is_hidden_as_it_is_and_percent_encoded():
    assert hide_key("key sk-ab in sk%2Dab and sk%2dab", "sk-ab") == "key *** in *** and ***"
    assert hide_key("nothing to hide", None) == "nothing to hide"


@pytest.mark.parametrize(
    ("url", "expected", "loopback"),
    [
        ("http://127.0.0.1:8000/v1/", Endpoint("http", "127.0.0.1", 8000, ""), True),
        ("HTTPS://Host.example/api/v1", Endpoint("https", "Host.example", 443, "/api"), False),
        ("http://localhost", Endpoint("http", "localhost", 80, ""), True),
        ("http://[::1]:9000", Endpoint("http", "::1", 9000, ""), True),
        ("http://[fe80::1%25eth0]:80/", Endpoint("http", "fe80::1%eth0", 80, ""), False),
        ("http://[fe80::1%eth0]", Endpoint("http", "fe80::1%eth0", 80, ""), False),  # the zone's bare % as well
        ("http://[::1%2541]", Endpoint("http", "::1%41", 80, ""), True),  # a zone's escapes undone, not the address's
        ("http://[::1%41]", Endpoint("http", "::1%41", 80, ""), True),
    ],
)
def test_a_server_url_is_read_into_its_endpoint(url, expected, loopback):
    got = endpoint(url)
    assert got == expected and got.loopback is loopback


def test_an_endpoint_is_written_with_its_port_and_an_ipv6_host_in_brackets():
    assert str(endpoint("https://host/base/v1")) == "https://host:443/base"
    assert str(endpoint("http://[::1]:9000")) == "http://[::1]:9000"
    assert str(endpoint("http://[fe80::1%eth0]")) == "http://[fe80::1%25eth0]:80"  # RFC 6874's %25, read back alike
    # libFuzzer's: a base ending in /v1 keeps it when read back (reading takes one /v1 off).
    for url in ("http://ps://[1]:8/v1/v1", "http://host/v1/v1/"):
        assert endpoint(str(endpoint(url))) == endpoint(url)
    assert str(endpoint("http://host/v1/v1")) == "http://host:80/v1/v1"


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://host name", "a URL is printable ASCII without spaces"),
        ("127.0.0.1:8000", "no scheme: give it as http:// or https://"),
        ("http://", "names no host"),
        ("http://host:0", "the port is '0'; a port is a number from 1 to 65535"),
        ("http://host:123456", "the port is '123456'"),
        ("http://[::1", "its [IPv6 address] has no closing bracket"),
        ("http://[xyz]", "'xyz' in brackets is not an IPv6 address"),
        ("https://[::1%%AAAAAAAA]:83", "the zone '%AAAAAAAA' of [::1] is no interface's name or number"),  # libFuzzer's
        ("http://[::1%25]", "the zone '' of [::1] is no interface's name or number"),
        ("http://[fe80::1%25eth%200]", "the zone 'eth%200' of [fe80::1]"),
        ("http://host/#part", "without a query or fragment"),
    ],
)
def test_a_malformed_url_is_refused_in_one_line_naming_the_fault(url, reason):
    with pytest.raises(MiaFastError, match="^server URL ") as raised:
        endpoint(url)
    assert reason in str(raised.value) and "\n" not in str(raised.value)


def test_the_key_is_read_without_surrounding_blanks(monkeypatch):
    monkeypatch.setenv("TEST_KEY", "  sk-abc\n")
    monkeypatch.setenv("EMPTY_KEY", "  ")
    assert environment_key("TEST_KEY") == "sk-abc"
    assert environment_key("EMPTY_KEY") is None and environment_key(None) is None


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "key", "MY_SERVICE_KEY_VARIABLE_2"])
def test_a_variables_name_is_taken(name):
    assert key_variable(name) == name


@pytest.mark.parametrize("pasted", ["sk-abc", "abcdefghij0123456789x", "has space"])
def test_what_is_no_variables_name_is_refused_without_being_shown(pasted):
    with pytest.raises(MiaFastError, match="it is not shown, as it may be the key itself") as raised:
        key_variable(pasted)
    assert pasted not in str(raised.value)
