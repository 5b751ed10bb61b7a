use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use mcp_stdio_tests::TempPath;

use super::*;

fn guard_env(name: &OsStr) -> Option<OsString> {
    match name.to_str()? {
        "HOME" => Some("/home/u".into()),
        "PATH" => Some("/usr/bin:/bin".into()),
        _ => None,
    }
}

fn flags(clear: bool, pass: &[&str], env: &[&str], files: &[&str]) -> EnvArgs {
    let os = |v: &[&str]| v.iter().map(OsString::from).collect();
    EnvArgs {
        env_clear: clear,
        env_pass: os(pass),
        env: os(env),
        env_file: os(files),
    }
}

fn resolve(args: &EnvArgs) -> Result<ServerEnv, EnvError> {
    ServerEnv::resolve(args, FileEnv::default(), guard_env)
}

fn vars(env: &ServerEnv) -> Vec<(String, String)> {
    env.vars
        .iter()
        .map(|(k, v)| (k.to_string_lossy().into(), v.to_string_lossy().into()))
        .collect()
}

fn pair(k: &str, v: &str) -> (String, String) {
    (k.to_owned(), v.to_owned())
}

/// A file holding `bytes` beside `dir`'s path.
fn secret_file(dir: &TempPath, file: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.with_file_name(file);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn issue_23_pass_set_and_file_values_are_resolved_by_name() {
    let dir = TempPath::new("unused");
    let token = secret_file(&dir, "token", b"tok-123456\n");
    let arg = format!("API_TOKEN={}", token.display());
    let env = resolve(&flags(
        true,
        &["HOME", "NOT_THERE"],
        &["LOG=debug", "EMPTY="],
        &[&arg],
    ))
    .unwrap();
    assert!(env.clear);
    assert_eq!(
        vars(&env),
        [
            pair("API_TOKEN", "tok-123456"),
            pair("EMPTY", ""),
            pair("HOME", "/home/u"),
            pair("LOG", "debug"),
        ]
    );
    assert_eq!(env.missing(), ["NOT_THERE"]);
    assert_eq!(env.secrets().count(), 1);
    let shown = format!("{env:?}");
    assert!(
        !shown.contains("tok-123456") && !shown.contains("debug"),
        "{shown}"
    );
}

#[test]
fn one_trailing_newline_is_removed_and_no_more() {
    let dir = TempPath::new("unused");
    for (bytes, want) in [
        (&b"abcdef\r\n"[..], "abcdef"),
        (b"abcdef\n", "abcdef"),
        (b"abcdef\n\n", "abcdef\n"),
        (b"abcdef", "abcdef"),
        (b" abcdef \n", " abcdef "),
    ] {
        let path = secret_file(&dir, "v", bytes);
        let env = resolve(&flags(false, &[], &[], &[&format!("V={}", path.display())])).unwrap();
        assert_eq!(vars(&env), [pair("V", want)], "{bytes:?}");
    }
}

/// Issue 23: a file that cannot be used is a usage error naming the
/// variable and the path, never the value.
#[test]
fn issue_23_unusable_files_are_errors_naming_variable_and_path_not_value() {
    let dir = TempPath::new("unused");
    let check = |file: &Path, wanted: &str| {
        let arg = format!("MY_KEY={}", file.display());
        let err = resolve(&flags(false, &[], &[], &[&arg]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("MY_KEY"), "{err}");
        assert!(err.contains(&file.display().to_string()), "{err}");
        assert!(err.contains(wanted), "{err}");
        err
    };
    check(&dir.with_file_name("missing"), "cannot read");
    check(&secret_file(&dir, "empty", b"\n"), "is empty");
    let big = vec![b'k'; MAX_ENV_FILE_BYTES + 1];
    let err = check(&secret_file(&dir, "big", &big), "larger than 65536 bytes");
    assert!(!err.contains("kkkk"), "{err}");
    let err = check(&secret_file(&dir, "nul", b"abc\0defg"), "NUL");
    assert!(!err.contains("defg"), "{err}");
    let err = check(&secret_file(&dir, "short", b"abc\n"), "at least 4 bytes");
    assert!(!err.contains("abc"), "{err}");
    // The limit itself is accepted.
    let max = secret_file(&dir, "max", &vec![b'm'; MAX_ENV_FILE_BYTES]);
    resolve(&flags(false, &[], &[], &[&format!("M={}", max.display())])).unwrap();
}

#[test]
fn issue_23_bad_names_are_errors() {
    for (args, wanted) in [
        (flags(false, &[""], &[], &[]), "empty"),
        (flags(false, &["A=B"], &[], &[]), "holds `=`"),
        (flags(false, &[], &["=value"], &[]), "empty"),
        (flags(false, &[], &["NO_EQUALS"], &[]), "no `=`"),
        (flags(false, &[], &[], &["X"]), "no `=`"),
        (flags(false, &[], &["A\0B=1"], &[]), "NUL"),
    ] {
        let err = resolve(&args).unwrap_err().to_string();
        assert!(err.contains(wanted), "{err}");
        assert!(!err.contains("value"), "{err}");
    }
}

#[test]
fn a_name_from_two_flags_is_an_error_and_a_repeated_flag_takes_the_last() {
    let err = resolve(&flags(false, &["HOME"], &["HOME=/x"], &[]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("HOME is given by both --env-pass and --env"),
        "{err}"
    );
    let env = resolve(&flags(false, &[], &["A=1", "A=2"], &[])).unwrap();
    assert_eq!(vars(&env), [pair("A", "2")]);
}

/// The file's settings, relative paths from its folder; flags override it.
#[test]
fn flags_override_the_config_files_entries() {
    let config = TempPath::new("guard.toml");
    secret_file(&config, "token.txt", b"from-the-file\n");
    let file = || FileEnv {
        config: Some(&config),
        clear: Some(true),
        pass: Some(vec!["HOME".into()]),
        set: Some(BTreeMap::from([("LOG".into(), "info".into())])),
        files: Some(BTreeMap::from([("TOKEN".into(), "token.txt".into())])),
    };
    let env = ServerEnv::resolve(&EnvArgs::default(), file(), guard_env).unwrap();
    assert!(env.clear);
    assert_eq!(
        vars(&env),
        [
            pair("HOME", "/home/u"),
            pair("LOG", "info"),
            pair("TOKEN", "from-the-file")
        ]
    );
    let args = flags(false, &[], &["TOKEN=plain", "HOME=/elsewhere"], &[]);
    let env = ServerEnv::resolve(&args, file(), guard_env).unwrap();
    assert_eq!(
        vars(&env),
        [
            pair("HOME", "/elsewhere"),
            pair("LOG", "info"),
            pair("TOKEN", "plain")
        ]
    );
    assert!(env.secrets().is_empty(), "an overridden file is not read");
    // Two keys of the file for one name: an error naming the file.
    let mut both = file();
    both.set = Some(BTreeMap::from([("TOKEN".into(), "x".into())]));
    let err = ServerEnv::resolve(&EnvArgs::default(), both, guard_env)
        .unwrap_err()
        .to_string();
    assert!(err.contains("TOKEN is given by both"), "{err}");
    assert!(err.contains("env_file.TOKEN"), "{err}");
}

/// The TOML keys reach the resolution through `GuardSettings`.
#[test]
fn the_config_file_keys_are_read() {
    let config = TempPath::new("guard.toml");
    secret_file(&config, "token.txt", b"toml-secret\n");
    std::fs::write(
        &config,
        "env_clear = true\nenv_pass = [\"NOT_SET_IN_ANY_ENV_93\"]\nenv = { LOG = \"info\" }\nenv_file = { TOKEN = \"token.txt\" }\n",
    )
    .unwrap();
    let args = crate::config::SettingsArgs {
        config: Some(config.to_path_buf()),
        ..Default::default()
    };
    let settings = crate::config::GuardSettings::resolve(&args).unwrap();
    let env = &settings.server_env;
    assert!(env.clear);
    assert_eq!(
        vars(env),
        [pair("LOG", "info"), pair("TOKEN", "toml-secret")]
    );
    assert_eq!(env.missing(), ["NOT_SET_IN_ANY_ENV_93"]);
    assert_eq!(env.secrets().count(), 1);
    std::fs::write(&config, "env_file = { TOKEN = \"nope.txt\" }\n").unwrap();
    let err = crate::config::GuardSettings::resolve(&args).unwrap_err();
    assert!(
        err.contains("env_file.TOKEN") && err.contains("nope.txt"),
        "{err}"
    );
}

/// Issue 23: with `--env-clear` and no PATH for the server, the program is
/// found in the guard's PATH; with a PATH for the server, the spawn looks
/// there itself.
#[cfg(unix)]
#[test]
fn issue_23_a_cleared_environment_still_finds_the_program_in_the_guards_path() {
    let dir = TempPath::new("unused");
    let folder = dir.with_file_name("bin");
    std::fs::create_dir(&folder).unwrap();
    let program = folder.join("my-server");
    std::fs::write(&program, "#!/bin/sh\n").unwrap();
    let guard_path =
        std::env::join_paths(["/nonexistent-folder", folder.to_str().unwrap()]).unwrap();
    let mut spec = CommandSpec::new("my-server");
    spec.arg("--flag");
    let cleared = resolve(&flags(true, &[], &["A=1"], &[])).unwrap();
    // Not executable: it is still chosen (the spawn then says why).
    let got = cleared.command(&spec, Some(&guard_path)).unwrap();
    assert_eq!(got.get_program(), program.as_os_str());
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    let got = cleared.command(&spec, Some(&guard_path)).unwrap();
    assert_eq!(got.get_program(), program.as_os_str());
    assert_eq!(got.get_args(), [OsString::from("--flag")]);
    assert!(got.get_env_clear());
    assert_eq!(got.get_envs(), [("A".into(), Some("1".into()))]);
    let err = cleared
        .command(&CommandSpec::new("no-such-server-here"), Some(&guard_path))
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::NotFound);
    // A path with a slash is kept as it is.
    let got = cleared
        .command(&CommandSpec::new("./x"), Some(&guard_path))
        .unwrap();
    assert_eq!(got.get_program(), "./x");
    // The server gets a PATH: the spawn looks there, the program is kept.
    let with_path = resolve(&flags(true, &["PATH"], &[], &[])).unwrap();
    let got = with_path.command(&spec, Some(&guard_path)).unwrap();
    assert_eq!(got.get_program(), "my-server");
    // No --env-clear: nothing changes but the variables.
    let inherit = resolve(&flags(false, &[], &["B=2"], &[])).unwrap();
    let got = inherit.command(&spec, Some(&guard_path)).unwrap();
    assert_eq!(got.get_program(), "my-server");
    assert!(!got.get_env_clear());
}
