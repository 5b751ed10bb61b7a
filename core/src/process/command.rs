//! What to spawn: a program and its arguments, never a shell line.
//!
//! The adapters turn a [`CommandSpec`] into a child process in its own
//! process group. Keeping the description here means all three adapters take
//! the same value.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use super::sandbox::Sandbox;

/// A program to run, with its arguments, environment and working directory.
///
/// There is deliberately no way to pass a shell command line: arguments are
/// passed to the program as they are, so nothing in them is interpreted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    program: OsString,
    args: Vec<OsString>,
    env: Vec<(OsString, Option<OsString>)>,
    clear_env: bool,
    cwd: Option<PathBuf>,
    sandbox: Option<Sandbox>,
}

impl CommandSpec {
    /// A command running `program` (looked up in `PATH` when it has no slash).
    pub fn new(program: impl AsRef<OsStr>) -> Self {
        Self {
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            env: Vec::new(),
            clear_env: false,
            cwd: None,
            sandbox: None,
        }
    }

    /// A command from an argv list: the first item is the program. `None` when empty.
    pub fn from_argv<I, S>(argv: I) -> Option<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut it = argv.into_iter();
        let mut spec = Self::new(it.next()?);
        spec.args(it);
        Some(spec)
    }

    /// Appends one argument.
    pub fn arg(&mut self, arg: impl AsRef<OsStr>) -> &mut Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Appends arguments.
    pub fn args<I, S>(&mut self, args: I) -> &mut Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Sets an environment variable for the child.
    pub fn env(&mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Self {
        self.env
            .push((key.as_ref().to_owned(), Some(value.as_ref().to_owned())));
        self
    }

    /// Removes an environment variable from the child's environment.
    pub fn env_remove(&mut self, key: impl AsRef<OsStr>) -> &mut Self {
        self.env.push((key.as_ref().to_owned(), None));
        self
    }

    /// Starts the child with an empty environment (plus what [`env`](Self::env) sets).
    pub fn env_clear(&mut self) -> &mut Self {
        self.clear_env = true;
        self.env.clear();
        self
    }

    /// Sets the working directory.
    pub fn current_dir(&mut self, dir: impl AsRef<Path>) -> &mut Self {
        self.cwd = Some(dir.as_ref().to_owned());
        self
    }

    /// Runs the child in `sandbox` (Linux; applied between `fork` and `exec`,
    /// so the parent stays unconfined). Elsewhere, or where the kernel cannot
    /// enforce it, the spawn fails unless the sandbox is best effort.
    pub fn sandbox(&mut self, sandbox: Sandbox) -> &mut Self {
        self.sandbox = Some(sandbox);
        self
    }

    /// The sandbox, if set.
    pub fn get_sandbox(&self) -> Option<&Sandbox> {
        self.sandbox.as_ref()
    }

    /// The program.
    pub fn get_program(&self) -> &OsStr {
        &self.program
    }

    /// The arguments.
    pub fn get_args(&self) -> &[OsString] {
        &self.args
    }

    /// Environment changes in order: `(key, Some(value))` sets, `(key, None)` removes.
    pub fn get_envs(&self) -> &[(OsString, Option<OsString>)] {
        &self.env
    }

    /// Whether the environment starts empty.
    pub fn get_env_clear(&self) -> bool {
        self.clear_env
    }

    /// The working directory, if set.
    pub fn get_current_dir(&self) -> Option<&Path> {
        self.cwd.as_deref()
    }

    /// A printable form for logs and records (lossy; arguments quoted when needed).
    pub fn display(&self) -> String {
        std::iter::once(&self.program)
            .chain(&self.args)
            .map(|a| {
                let s = a.to_string_lossy();
                if s.is_empty() || s.contains(|c: char| c.is_whitespace() || c == '"' || c == '\'')
                {
                    format!("{s:?}")
                } else {
                    s.into_owned()
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_is_kept_verbatim() {
        let spec = CommandSpec::from_argv(["node", "server.js", "a b", ""]).unwrap();
        assert_eq!(spec.get_program(), "node");
        assert_eq!(spec.get_args().len(), 3);
        assert_eq!(spec.display(), r#"node server.js "a b" """#);
        assert!(CommandSpec::from_argv(Vec::<String>::new()).is_none());
    }

    #[test]
    fn env_changes_keep_order() {
        let mut spec = CommandSpec::new("x");
        spec.env("A", "1").env_remove("B");
        assert_eq!(
            spec.get_envs(),
            &[("A".into(), Some("1".into())), ("B".into(), None)]
        );
        spec.env_clear();
        assert!(spec.get_env_clear() && spec.get_envs().is_empty());
    }
}
