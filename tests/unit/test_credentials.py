"""The token file's credentials (coordinator/credentials.py): the line format, the older plain
tokens, every problem `check` and `serve` refuse, the file's mode, and the lookup.

The lookup's cost (whatever the number of lines and a shared prefix) is measured in
tests/unit/test_credential_lookup_cost.py."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from coordinator import constants as C
from coordinator.credentials import (
    TOKEN_ENV,
    Credential,
    Credentials,
    Role,
    exposure,
    hashed_line,
    load_credentials,
    parse_credentials,
    shared_bits,
    token_digest,
)
from coordinator.errors import ConfigError

GOOD_TOKEN = "k" * 32
OTHER_TOKEN = "n" * 40
DRIVER_TOKEN = "d" * 43


def _private(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    path.chmod(0o600)
    return path


def _names(creds: list[Credential]) -> list[tuple[str, str, str | None, bool]]:
    return [(c.name, c.role.value, c.machine, c.plain) for c in creds]


def _problems(text: str, *, env: bool = False) -> str:
    with pytest.raises(ConfigError) as exc:
        parse_credentials(text, source="tokens", env=env)
    return str(exc.value)


# ---------------------------------------------------------------- the line format


def test_the_contract_example_parses() -> None:
    text = (
        "# who may do what\n"
        f"{hashed_line(DRIVER_TOKEN, 'studio-a', Role.DRIVER, 'studio-a')}\n"
        f"sha256:{'ab' * 32}  name=control-room  role=reader\n"
        f"sha256:{'CD' * 32}  name=ops  role=admin   # upper-case hex reads too\n"
        "\n"
        f"{GOOD_TOKEN}   # the older form\n"
    )
    creds = parse_credentials(text, source="tokens")
    assert _names(creds) == [
        ("studio-a", "driver", "studio-a", False),
        ("control-room", "reader", None, False),
        ("ops", "admin", None, False),
        ("token-1", "admin", None, True),
    ]
    assert creds[0].digest == token_digest(DRIVER_TOKEN.encode())
    assert creds[2].digest == bytes.fromhex("cd" * 32)
    assert [c.line for c in creds] == [2, 3, 4, 6]


def test_the_hashed_line_holds_no_secret() -> None:
    line = hashed_line(DRIVER_TOKEN, "studio-a", Role.DRIVER, "studio-a")
    assert DRIVER_TOKEN not in line
    assert line == f"sha256:{token_digest(DRIVER_TOKEN.encode()).hex()} name=studio-a " + (
        "role=driver machine=studio-a"
    )
    assert "machine" not in hashed_line(DRIVER_TOKEN, "ops", Role.ADMIN, None)


def test_plain_tokens_are_admins_named_in_order(tmp_path: Path) -> None:
    f = _private(tmp_path / "t", f"# current and next\n\n{GOOD_TOKEN}\n   {OTHER_TOKEN}   \n")
    creds = load_credentials(f, {})
    assert _names(creds) == [("token-1", "admin", None, True), ("token-2", "admin", None, True)]
    assert Credentials(creds).plain == 2


def test_an_indented_comment_is_not_a_token(tmp_path: Path) -> None:
    comment = "   # rotated on monday; the old one was retired that day"
    f = _private(tmp_path / "t", f"{GOOD_TOKEN}\n{comment}\n")
    assert len(load_credentials(f, {})) == 1


@pytest.mark.parametrize("sep", [",", " ", "\n", ", "])
def test_several_plain_tokens_in_the_environment(sep: str) -> None:
    creds = load_credentials(None, {TOKEN_ENV: GOOD_TOKEN + sep + OTHER_TOKEN})
    assert [c.digest for c in creds] == [
        token_digest(t.encode()) for t in (GOOD_TOKEN, OTHER_TOKEN)
    ]
    assert [c.name for c in creds] == ["token-1", "token-2"]


def test_hashed_lines_in_the_environment() -> None:
    env = {TOKEN_ENV: f"{hashed_line(DRIVER_TOKEN, 'a', Role.DRIVER, None)}\n{GOOD_TOKEN}\n"}
    assert _names(load_credentials(None, env)) == [
        ("a", "driver", None, False),
        ("token-1", "admin", None, True),
    ]


def test_the_file_wins_over_the_environment(tmp_path: Path) -> None:
    f = _private(tmp_path / "t", OTHER_TOKEN + "\n")
    creds = load_credentials(f, {TOKEN_ENV: GOOD_TOKEN})
    assert [c.digest for c in creds] == [token_digest(OTHER_TOKEN.encode())]


def test_the_process_environment_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, OTHER_TOKEN)
    assert [c.digest for c in load_credentials(None)] == [token_digest(OTHER_TOKEN.encode())]


# ---------------------------------------------------------------- what is refused


def _assert_how_to(msg: str) -> None:
    assert "token add" in msg and "secrets.token_urlsafe(32)" in msg
    assert TOKEN_ENV in msg and "--token-file" in msg


@pytest.mark.parametrize("bad", ["short", "x" * 31, f"{GOOD_TOKEN},{'y' * 31}"])
def test_a_short_plain_token_is_refused_with_how_to(bad: str) -> None:
    msg = _problems(bad, env=True)
    assert f"at least {C.MIN_TOKEN_BYTES}" in msg
    _assert_how_to(msg)
    for part in bad.split(","):
        assert part not in msg  # never the token itself


def test_token_length_is_counted_in_bytes() -> None:
    assert len(parse_credentials("é" * 16, source="t")) == 1  # 32 bytes
    _problems("é" * 15 + "a")  # 31 bytes


@pytest.mark.parametrize("env", [{}, {TOKEN_ENV: ""}, {TOKEN_ENV: " , \n"}])
def test_no_token_is_refused_with_how_to(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as exc:
        load_credentials(None, env)
    assert "no token" in str(exc.value)
    _assert_how_to(str(exc.value))


def test_an_empty_or_missing_file_is_refused(tmp_path: Path) -> None:
    empty = _private(tmp_path / "empty", "# only a comment\n\n")
    with pytest.raises(ConfigError) as exc:
        load_credentials(empty, {TOKEN_ENV: GOOD_TOKEN})
    _assert_how_to(str(exc.value))
    missing = tmp_path / "missing"
    with pytest.raises(ConfigError) as exc:
        load_credentials(missing, {})
    assert str(missing) in str(exc.value)
    _assert_how_to(str(exc.value))


def test_duplicate_names_are_refused() -> None:
    a = hashed_line(DRIVER_TOKEN, "studio-a", Role.DRIVER, None)
    b = hashed_line(OTHER_TOKEN, "studio-a", Role.READER, None)
    msg = _problems(f"{a}\n{b}\n")
    assert "line 2: duplicate name 'studio-a' (also line 1)" in msg


def test_a_plain_token_named_like_a_hashed_line_is_a_duplicate() -> None:
    a = hashed_line(DRIVER_TOKEN, "token-1", Role.DRIVER, None)
    assert "duplicate name 'token-1'" in _problems(f"{a}\n{GOOD_TOKEN}\n")


def test_the_same_token_twice_is_refused() -> None:
    a = hashed_line(DRIVER_TOKEN, "a", Role.DRIVER, None)
    b = hashed_line(DRIVER_TOKEN, "b", Role.READER, None)
    assert "line 2: the same token as line 1 ('a')" in _problems(f"{a}\n{b}\n")
    assert "the same token as line 1" in _problems(f"{GOOD_TOKEN}\n{GOOD_TOKEN}\n")


@pytest.mark.parametrize("role", ["reader", "admin"])
def test_a_machine_on_a_non_driver_role_is_refused(role: str) -> None:
    msg = _problems(f"sha256:{'a' * 64} name=x role={role} machine=studio-a\n")
    assert "machine= is only for a driver credential" in msg


@pytest.mark.parametrize("hexpart", ["a" * 63, "a" * 65, "g" * 64, "", "a" * 32 + " " + "a" * 31])
def test_a_bad_hash_is_refused(hexpart: str) -> None:
    assert "line 1: a bad hash" in _problems(f"sha256:{hexpart} name=x role=admin\n")


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ("name=x", "role= is required"),
        ("role=driver", "name= is required"),
        ("name=x role=owner", "role= is required: reader, driver or admin"),
        ("name=a/b role=driver", "name= is required: 1-64 of"),
        ("name=x role=driver machine=a/b", "machine= must be 1-64"),
        ("name=x role=driver name=y", "name= given twice"),
        ("name=x rol=driver", "unknown field 'rol'"),
    ],
)
def test_a_bad_field_is_refused(fields: str, says: str) -> None:
    assert says in _problems(f"sha256:{'a' * 64} {fields}\n")


def test_a_stray_word_is_never_echoed() -> None:
    """A token pasted after a hashed line, or beside a plain one, is not shown."""
    secret = "s3cret-" + "z" * 30
    msg = _problems(f"sha256:{'a' * 64} name=x role=admin {secret}\n")
    assert "not key=value" in msg and secret not in msg
    msg = _problems(f"{GOOD_TOKEN} {secret}\n")
    assert "holds one token and nothing else" in msg
    assert secret not in msg and GOOD_TOKEN not in msg


def test_every_problem_is_named_by_line() -> None:
    text = f"sha256:{'a' * 64} name=x role=reader machine=m\n\nsha256:zz name=y role=admin\n"
    msg = _problems(text)
    assert "line 1:" in msg and "line 3:" in msg


# ---------------------------------------------------------------- the file's mode


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o606])
def test_a_file_others_may_read_or_change_is_refused(tmp_path: Path, mode: int) -> None:
    f = _private(tmp_path / "t", GOOD_TOKEN + "\n")
    f.chmod(mode)
    with pytest.raises(ConfigError) as exc:
        load_credentials(f, {})
    msg = str(exc.value)
    assert f"mode {mode:04o}" in msg and f"chmod 600 {f}" in msg
    assert GOOD_TOKEN not in msg


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o700])
def test_a_private_file_is_accepted(tmp_path: Path, mode: int) -> None:
    f = _private(tmp_path / "t", GOOD_TOKEN + "\n")
    f.chmod(mode)
    assert exposure(f) is None
    assert len(load_credentials(f, {})) == 1


def _acl(*entries: tuple[int, int]) -> bytes:
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", t, p, 0) for t, p in entries)


USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20


def test_an_acl_for_the_services_user_is_private() -> None:
    """systemd's LoadCredential: mode 0400 plus a named user's r entry; the mode then reads
    0440 (the group bits are the ACL's mask), yet no group may read it."""
    acl = _acl((USER_OBJ, 4), (USER, 4), (GROUP_OBJ, 0), (MASK, 4), (OTHER, 0))
    assert shared_bits(0o440, acl) == 0
    assert shared_bits(0o440) == 0o040  # without the ACL: the group may read


def test_an_acl_for_a_group_is_shared() -> None:
    assert shared_bits(0o440, _acl((USER_OBJ, 4), (GROUP_OBJ, 4), (MASK, 4), (OTHER, 0)))
    assert shared_bits(0o440, _acl((USER_OBJ, 4), (GROUP_OBJ, 0), (GROUP, 4), (MASK, 4)))
    assert shared_bits(0o404, _acl((USER_OBJ, 4), (GROUP_OBJ, 0), (OTHER, 4))) == 0o004


# ---------------------------------------------------------------- the lookup


def _set(*lines: str) -> Credentials:
    return Credentials(parse_credentials("\n".join(lines), source="t"))


def test_authenticate_finds_the_credential_by_its_token() -> None:
    creds = _set(
        hashed_line(DRIVER_TOKEN, "studio-a", Role.DRIVER, "studio-a"),
        GOOD_TOKEN,
    )
    found = creds.authenticate(DRIVER_TOKEN.encode())
    assert found is not None and (found.name, found.machine) == ("studio-a", "studio-a")
    plain = creds.authenticate(GOOD_TOKEN.encode())
    assert plain is not None and plain.name == "token-1" and plain.role is Role.ADMIN
    for wrong in (b"", OTHER_TOKEN.encode(), DRIVER_TOKEN.encode()[:-1], token_digest(b"x")):
        assert creds.authenticate(wrong) is None
    # the stored digest is no token: presenting it authenticates nothing
    assert creds.authenticate(token_digest(DRIVER_TOKEN.encode()).hex().encode()) is None


def test_replace_swaps_the_whole_set() -> None:
    creds = _set(GOOD_TOKEN)
    creds.replace(parse_credentials(OTHER_TOKEN, source="t"))
    assert creds.authenticate(GOOD_TOKEN.encode()) is None
    assert creds.authenticate(OTHER_TOKEN.encode()) is not None
    assert len(creds) == 1


def test_roles_include_the_lesser_ones() -> None:
    reader, driver, admin = (Credential("n", r) for r in Role)
    assert reader.allows(Role.READER) and not reader.allows(Role.DRIVER)
    assert driver.allows(Role.READER) and driver.allows(Role.DRIVER)
    assert not driver.allows(Role.ADMIN) and admin.allows(Role.ADMIN)
    assert not reader.can_write and driver.can_write and admin.can_write


def test_a_credential_never_shows_its_digest() -> None:
    c = parse_credentials(GOOD_TOKEN, source="t")[0]
    assert c.digest.hex() not in repr(c) and GOOD_TOKEN not in repr(c)
