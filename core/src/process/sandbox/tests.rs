use super::*;

fn kernel(abi: u32) -> KernelSupport {
    KernelSupport {
        landlock_abi: abi,
        user_namespaces: true,
        privileged: false,
    }
}

fn project() -> Sandbox {
    let mut sb = Sandbox::new();
    sb.read_exec("/usr").write("/work/project");
    sb
}

#[test]
fn sandbox_a_full_kernel_enforces_everything_and_has_no_gaps() {
    let plan = project().plan(&kernel(7));
    assert_eq!(plan.landlock_abi, 7);
    assert!(plan.filesystem && plan.network_rules && plan.ipc_scope);
    assert!(plan.gaps.is_empty());
    assert!(plan.may_spawn());
    assert!(plan.refusal().is_none());
    // Network `none` gets an empty network namespace where one can be made.
    assert!(plan.user_namespace && plan.network_namespace);
}

#[test]
fn sandbox_no_landlock_is_refused_by_default_and_recorded_under_best_effort() {
    let plan = project().plan(&kernel(0));
    assert!(!plan.filesystem && !plan.network_rules && !plan.ipc_scope);
    assert_eq!(plan.gaps, [SandboxGap::Filesystem]);
    let refusal = plan.refusal().expect("refused");
    let text = refusal.to_string();
    assert!(text.contains("no Landlock"), "{text}");
    assert!(text.contains("best effort"), "{text}");

    let mut sb = project();
    sb.enforcement(Enforcement::BestEffort);
    let plan = sb.plan(&kernel(0));
    assert!(plan.may_spawn());
    assert_eq!(plan.gaps.len(), 1);
}

#[test]
fn sandbox_each_older_abi_names_exactly_what_it_lacks() {
    let sb = project();
    let gaps = |abi| sb.plan(&kernel(abi)).gaps;
    assert_eq!(
        gaps(1),
        [
            SandboxGap::Truncate,
            SandboxGap::Network,
            SandboxGap::IpcScope
        ]
    );
    assert_eq!(
        gaps(2),
        [
            SandboxGap::Truncate,
            SandboxGap::Network,
            SandboxGap::IpcScope
        ]
    );
    assert_eq!(gaps(3), [SandboxGap::Network, SandboxGap::IpcScope]);
    assert_eq!(gaps(4), [SandboxGap::IpcScope]);
    assert_eq!(gaps(5), [SandboxGap::IpcScope]);
    assert!(gaps(6).is_empty());
    // A newer kernel is planned for at the newest ABI known.
    let plan = sb.plan(&kernel(11));
    assert_eq!((plan.landlock_abi, plan.kernel_landlock_abi), (7, 11));
    assert!(plan.gaps.is_empty());
}

#[test]
fn sandbox_unrestricted_network_and_no_ipc_isolation_need_nothing_of_the_kernel() {
    let mut sb = project();
    sb.network(SandboxNetwork::Unrestricted).isolate_ipc(false);
    let plan = sb.plan(&kernel(3));
    assert!(plan.gaps.is_empty(), "{:?}", plan.gaps);
    assert!(!plan.network_rules && !plan.ipc_scope);
    assert!(!plan.user_namespace && !plan.network_namespace);
}

#[test]
fn sandbox_the_process_limit_is_a_gap_for_root_and_per_sandbox_with_a_user_namespace() {
    let mut sb = project();
    sb.network(SandboxNetwork::Unrestricted)
        .limits(ResourceLimits {
            processes: Some(32),
            ..ResourceLimits::default()
        });
    let plan = sb.plan(&kernel(7));
    assert!(plan.user_namespace && !plan.network_namespace);
    assert!(plan.gaps.is_empty());
    let root = KernelSupport {
        privileged: true,
        ..kernel(7)
    };
    assert_eq!(sb.plan(&root).gaps, [SandboxGap::ProcessLimitPrivileged]);
    // Without user namespaces the limit counts the user's processes; not a gap.
    let no_userns = KernelSupport {
        user_namespaces: false,
        ..kernel(7)
    };
    let plan = sb.plan(&no_userns);
    assert!(!plan.user_namespace && plan.gaps.is_empty());
}

#[test]
fn validation_names_the_first_problem() {
    assert_eq!(project().validate(), Ok(()));
    let mut sb = Sandbox::new();
    sb.read("relative/dir");
    assert!(matches!(
        sb.validate(),
        Err(SandboxError::RelativePath { .. })
    ));
    let mut sb = Sandbox::new();
    for i in 0..=MAX_SANDBOX_PATHS {
        sb.read(format!("/p/{i}"));
    }
    assert_eq!(
        sb.validate(),
        Err(SandboxError::TooManyPaths {
            count: MAX_SANDBOX_PATHS + 1
        })
    );
    let mut sb = Sandbox::new();
    sb.network(SandboxNetwork::Ports {
        connect: vec![443; MAX_SANDBOX_PORTS],
        bind: vec![8080],
    });
    assert!(matches!(
        sb.validate(),
        Err(SandboxError::TooManyPorts { .. })
    ));
    let mut sb = Sandbox::new();
    sb.limits(ResourceLimits {
        open_files: Some(0),
        ..ResourceLimits::default()
    });
    assert_eq!(
        sb.validate(),
        Err(SandboxError::ZeroLimit {
            limit: "open_files"
        })
    );
}

#[test]
fn rules_for_one_path_add_up_in_first_appearance_order() {
    let mut sb = Sandbox::new();
    sb.read("/a")
        .write("/b")
        .read_exec("/a")
        .allow("/b", PathAccess::READ_EXEC);
    let merged = sb.merged_paths();
    assert_eq!(merged.len(), 2);
    assert_eq!(merged[0].path, Path::new("/a"));
    assert_eq!(merged[0].access, PathAccess::READ_EXEC);
    assert_eq!(merged[1].access, PathAccess::WRITE_EXEC);
    assert_eq!(merged[1].access.as_str(), "write+exec");
}

#[test]
fn limits_iterate_by_name_in_a_fixed_order() {
    let limits = ResourceLimits {
        cpu_seconds: Some(5),
        memory: Some(1 << 30),
        ..ResourceLimits::default()
    };
    let named: Vec<_> = limits.iter().collect();
    assert_eq!(named, [("memory", 1 << 30), ("cpu_seconds", 5)]);
}

#[test]
fn sandbox_the_record_names_every_rule_and_gap() {
    let mut sb = project();
    sb.network(SandboxNetwork::Ports {
        connect: vec![443],
        bind: vec![],
    })
    .limits(ResourceLimits {
        memory: Some(1 << 29),
        ..ResourceLimits::default()
    })
    .enforcement(Enforcement::BestEffort);
    let record = sb.plan(&kernel(3)).record(&sb);
    let json = serde_json::to_value(&record).expect("serializes");
    assert_eq!(json["enforcement"], "best_effort");
    assert_eq!(json["landlock_abi"], 3);
    assert_eq!(json["paths"][0]["path"], "/usr");
    assert_eq!(json["paths"][0]["access"], "read+exec");
    assert_eq!(json["paths"][1]["access"], "write");
    assert_eq!(json["network"], "ports");
    assert_eq!(json["connect_ports"][0], 443);
    assert!(json.get("bind_ports").is_none());
    assert_eq!(json["limits"]["memory"], 1 << 29);
    assert_eq!(json["network_enforced"], false);
    assert_eq!(json["gaps"][0]["gap"], "network");
    assert_eq!(json["gaps"][1]["gap"], "ipc_scope");
}
