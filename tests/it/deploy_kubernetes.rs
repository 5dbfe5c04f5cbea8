//! deploy/kubernetes/ as a cluster would take it:
//!
//! - every kustomization renders with kubectl's kustomize and every object it renders passes the
//!   Kubernetes schemas strictly (kubernetes-validate `--strict`: unknown fields rejected) for the
//!   oldest and the newest Kubernetes version the manifests are written for; a wrong field and an
//!   unknown kind are rejected by the same check;
//! - the ConfigMap carries examples/config.yaml byte for byte, mounted as a directory;
//! - the file-based Deployments' containers run as written: the real binary's `check` accepts the
//!   ConfigMap's data laid out as the kubelet lays it out, `serve` starts with the container's
//!   arguments and environment (on a real redis-server for the Redis variant), answers the
//!   probes' gRPC health service names, and takes in a ConfigMap update made as the kubelet makes
//!   it (a new directory, then the `..data` symlink swapped);
//! - the xDS example sets only variables ratelimitd answers, with envoyproxy/ratelimit's command;
//! - termination grace covers the preStop pause and the drain; pods run as the Dockerfile's user.
//!
//! kubectl and kubernetes-validate come from `scripts/ensure-kubernetes-tools.sh` (scripts/test.sh
//! exports KUBECTL_BIN and KUBERNETES_VALIDATE_BIN); without them these tests fail, never skip.

use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use saphyr::{LoadableYamlNode, YamlOwned};

use testkit::ratelimitd::{command, http_get, run_to_end, Ratelimitd};
use testkit::redis_server::RedisServer;

/// The kustomizations under deploy/kubernetes/.
const KUSTOMIZATIONS: [&str; 3] = ["base", "redis", "xds"];

/// The Kubernetes versions the manifests are validated against: the first with the preStop
/// `sleep` action generally available, and the newest the validator carries.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.34.0", "1.37.0"];

/// How long ratelimitd drains after SIGTERM at most (docs/operations/health.md).
const DRAIN_SECONDS: i64 = 5;

const TIMEOUT: Duration = Duration::from_secs(30);

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn deploy_dir() -> PathBuf {
    repo_root().join("deploy/kubernetes")
}

/// A tool of scripts/ensure-kubernetes-tools.sh: `variable`, else target/kubernetes-venv/bin/NAME.
fn tool(variable: &str, name: &str) -> PathBuf {
    let bin = match std::env::var_os(variable) {
        Some(bin) => PathBuf::from(bin),
        None => repo_root().join("target/kubernetes-venv/bin").join(name),
    };
    assert!(
        bin.is_file(),
        "{name} is needed for tests/it/deploy_kubernetes.rs and was not found at {}; run \
         `bash scripts/ensure-kubernetes-tools.sh` (scripts/test.sh does) or set {variable}",
        bin.display()
    );
    bin
}

fn kubectl() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| tool("KUBECTL_BIN", "kubectl"))
}

fn kubernetes_validate() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| tool("KUBERNETES_VALIDATE_BIN", "kubernetes-validate"))
}

/// `kubectl kustomize deploy/kubernetes/NAME`.
fn render(kustomization: &str) -> String {
    let output = Command::new(kubectl())
        .arg("kustomize")
        .arg(deploy_dir().join(kustomization))
        .output()
        .expect("run kubectl kustomize");
    assert!(
        output.status.success(),
        "kubectl kustomize deploy/kubernetes/{kustomization} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 manifests")
}

fn documents(text: &str) -> Vec<YamlOwned> {
    YamlOwned::load_from_str(text)
        .unwrap_or_else(|e| panic!("rendered manifests are not YAML: {e}"))
        .into_iter()
        .filter(|doc| !doc.is_null())
        .collect()
}

/// Validates every object of `manifests` strictly against Kubernetes `version`. Fails unless the
/// validator exits 0 and reports every object as passed: it only warns about a kind it has no
/// schema for (a misspelt kind, say), which must not pass.
fn validate(manifests: &str, version: &str) -> Result<(), String> {
    let objects = documents(manifests).len();
    let mut child = Command::new(kubernetes_validate())
        .args(["--strict", "--kubernetes-version", version, "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kubernetes-validate");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(manifests.as_bytes())
        .expect("write the manifests");
    let output = child
        .wait_with_output()
        .expect("kubernetes-validate output");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let passed = said
        .lines()
        .filter(|line| line.contains(" passed for resource "))
        .count();
    if !output.status.success() || passed != objects || said.contains("WARN") {
        return Err(format!(
            "{passed} of {objects} objects passed ({}):\n{said}",
            output.status
        ));
    }
    Ok(())
}

/// The node at `path` (dot-separated mapping keys) under `node`.
fn at<'a>(node: &'a YamlOwned, path: &str) -> &'a YamlOwned {
    path.split('.').fold(node, |node, key| {
        node.as_mapping_get(key)
            .unwrap_or_else(|| panic!("no `{key}` on the way to `{path}` in {node:?}"))
    })
}

fn try_at<'a>(node: &'a YamlOwned, path: &str) -> Option<&'a YamlOwned> {
    path.split('.')
        .try_fold(node, |node, key| node.as_mapping_get(key))
}

fn text<'a>(node: &'a YamlOwned, path: &str) -> &'a str {
    at(node, path)
        .as_str()
        .unwrap_or_else(|| panic!("`{path}` is not a string"))
}

fn integer(node: &YamlOwned, path: &str) -> i64 {
    at(node, path)
        .as_integer()
        .unwrap_or_else(|| panic!("`{path}` is not an integer"))
}

fn list<'a>(node: &'a YamlOwned, path: &str) -> &'a [YamlOwned] {
    try_at(node, path)
        .map(|list| {
            list.as_sequence()
                .unwrap_or_else(|| panic!("`{path}` is not a list"))
                .as_slice()
        })
        .unwrap_or_default()
}

fn strings(node: &YamlOwned, path: &str) -> Vec<String> {
    list(node, path)
        .iter()
        .map(|item| item.as_str().expect("a string").to_string())
        .collect()
}

/// The rendered object of `kind` named `name`.
fn object<'a>(docs: &'a [YamlOwned], kind: &str, name: &str) -> &'a YamlOwned {
    find_object(docs, kind, name)
        .unwrap_or_else(|| panic!("no {kind} {name} among the rendered objects"))
}

fn find_object<'a>(docs: &'a [YamlOwned], kind: &str, name: &str) -> Option<&'a YamlOwned> {
    docs.iter()
        .find(|doc| text(doc, "kind") == kind && text(doc, "metadata.name") == name)
}

/// The ConfigMap's `config.yaml` key (a key with a dot, which [`at`] cannot name).
fn config_yaml(config_map: &YamlOwned) -> &str {
    at(config_map, "data")
        .as_mapping_get("config.yaml")
        .and_then(YamlOwned::as_str)
        .expect("a config.yaml key")
}

/// The ratelimitd container of the ratelimitd Deployment.
fn ratelimitd_container(docs: &[YamlOwned]) -> &YamlOwned {
    let deployment = object(docs, "Deployment", "ratelimitd");
    list(deployment, "spec.template.spec.containers")
        .iter()
        .find(|c| text(c, "name") == "ratelimitd")
        .expect("a container named ratelimitd")
}

/// The user the Dockerfile's image runs as (`useradd ... --uid N`).
fn dockerfile_uid() -> i64 {
    let dockerfile = fs::read_to_string(repo_root().join("Dockerfile")).expect("read Dockerfile");
    let words: Vec<&str> = dockerfile.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| *w == "--uid")
        .expect("the Dockerfile's useradd --uid");
    words[at + 1].parse().expect("a numeric uid")
}

#[test]
fn every_kustomization_renders_and_passes_the_kubernetes_schemas_strictly() {
    for kustomization in KUSTOMIZATIONS {
        let manifests = render(kustomization);
        for version in KUBERNETES_VERSIONS {
            if let Err(why) = validate(&manifests, version) {
                panic!("deploy/kubernetes/{kustomization} against Kubernetes {version}: {why}");
            }
        }
    }
}

#[test]
fn a_field_the_schema_lacks_and_an_unknown_kind_are_rejected() {
    let manifests = render("base");
    validate(&manifests, KUBERNETES_VERSIONS[0]).expect("the base as written passes");

    let misspelt_field = manifests.replacen("periodSeconds:", "periodSecond:", 1);
    assert_ne!(misspelt_field, manifests);
    let why = validate(&misspelt_field, KUBERNETES_VERSIONS[0])
        .expect_err("an unknown field must be rejected");
    assert!(why.contains("'periodSecond' was unexpected"), "{why}");

    let misspelt_kind = manifests.replacen("kind: PodDisruptionBudget", "kind: PodDisruption", 1);
    assert_ne!(misspelt_kind, manifests);
    let why = validate(&misspelt_kind, KUBERNETES_VERSIONS[0])
        .expect_err("a kind without a schema must not pass");
    assert!(why.contains("PodDisruption"), "{why}");
}

#[test]
fn every_manifest_file_belongs_to_its_kustomization() {
    let mut seen = 0;
    for kustomization in KUSTOMIZATIONS {
        let dir = deploy_dir().join(kustomization);
        let file = fs::read_to_string(dir.join("kustomization.yaml")).expect("kustomization.yaml");
        let doc = &documents(&file)[0];
        let mut named: BTreeSet<String> = strings(doc, "resources").into_iter().collect();
        for patch in list(doc, "patches") {
            if let Some(path) = try_at(patch, "path") {
                named.insert(path.as_str().expect("a patch path").to_string());
            }
        }
        for generator in list(doc, "configMapGenerator") {
            named.extend(strings(generator, "files"));
        }
        for entry in fs::read_dir(&dir).expect("read the kustomization's directory") {
            let name = entry
                .expect("entry")
                .file_name()
                .into_string()
                .expect("UTF-8");
            if name == "kustomization.yaml" {
                continue;
            }
            assert!(
                named.contains(&name),
                "deploy/kubernetes/{kustomization}/{name} is not named in its kustomization.yaml, \
                 so it is neither rendered nor validated"
            );
            seen += 1;
        }
    }
    assert!(seen >= 7, "only {seen} manifest files found");
}

#[test]
fn the_configmap_is_examples_config_yaml_byte_for_byte_mounted_as_a_directory() {
    let example = fs::read_to_string(repo_root().join("examples/config.yaml")).expect("example");
    let copy = fs::read_to_string(deploy_dir().join("base/config.yaml")).expect("copy");
    assert!(
        copy == example,
        "deploy/kubernetes/base/config.yaml differs from examples/config.yaml: copy it again"
    );
    for kustomization in ["base", "redis"] {
        let docs = documents(&render(kustomization));
        let config_map = object(&docs, "ConfigMap", "ratelimitd-config");
        assert_eq!(config_yaml(config_map), example, "{kustomization}");

        let deployment = object(&docs, "Deployment", "ratelimitd");
        let volume = list(deployment, "spec.template.spec.volumes")
            .iter()
            .find(|v| {
                try_at(v, "configMap.name").and_then(YamlOwned::as_str) == Some("ratelimitd-config")
            })
            .expect("a volume of the ConfigMap");
        let mounts = list(ratelimitd_container(&docs), "volumeMounts");
        let mount = mounts
            .iter()
            .find(|m| text(m, "name") == text(volume, "name"))
            .expect("the ConfigMap's volume mounted");
        assert!(
            try_at(mount, "subPath").is_none() && try_at(mount, "subPathExpr").is_none(),
            "{kustomization}: a subPath mount is never updated with its ConfigMap"
        );
    }
    let xds = documents(&render("xds"));
    assert!(find_object(&xds, "ConfigMap", "ratelimitd-config").is_none());
}

/// A ConfigMap volume as the kubelet writes it: the data in a timestamped directory, `..data` a
/// symlink to it, and each key a symlink through `..data`.
struct ConfigMapVolume {
    dir: tempfile::TempDir,
    generation: u32,
}

impl ConfigMapVolume {
    fn new(data: &[(&str, &str)]) -> ConfigMapVolume {
        let mut volume = ConfigMapVolume {
            dir: tempfile::tempdir().expect("tempdir"),
            generation: 0,
        };
        volume.update(data);
        for (key, _) in data {
            symlink(Path::new("..data").join(key), volume.path().join(key)).expect("key symlink");
        }
        volume
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a new timestamped directory and swaps `..data` to it in one rename, then removes
    /// the old directory, as the kubelet's atomic writer does.
    fn update(&mut self, data: &[(&str, &str)]) {
        let old = format!("..2026_01_01_00_00_00.{:09}", self.generation);
        self.generation += 1;
        let new = format!("..2026_01_01_00_00_00.{:09}", self.generation);
        fs::create_dir(self.path().join(&new)).expect("timestamped directory");
        for (key, value) in data {
            fs::write(self.path().join(&new).join(key), value).expect("write a key");
        }
        symlink(&new, self.path().join("..data_tmp")).expect("..data_tmp");
        fs::rename(self.path().join("..data_tmp"), self.path().join("..data"))
            .expect("swap ..data");
        if self.generation > 1 {
            fs::remove_dir_all(self.path().join(old)).expect("remove the old directory");
        }
    }
}

/// `args` with the value of `flag` replaced (or the flag appended with `value`).
fn with_flag(mut args: Vec<String>, flag: &str, value: &str) -> Vec<String> {
    match args.iter().position(|a| a == flag) {
        Some(at) => args[at + 1] = value.to_string(),
        None => args.extend([flag.to_string(), value.to_string()]),
    }
    args
}

/// The container's environment, with `resourceFieldRef: limits.cpu` resolved as the kubelet
/// does (rounded up to whole CPUs with a divisor of 1).
fn environment(container: &YamlOwned) -> Vec<(String, String)> {
    list(container, "env")
        .iter()
        .map(|var| {
            let name = text(var, "name").to_string();
            if let Some(value) = try_at(var, "value") {
                return (name, value.as_str().expect("a string value").to_string());
            }
            assert_eq!(
                text(var, "valueFrom.resourceFieldRef.resource"),
                "limits.cpu",
                "{name}"
            );
            assert_eq!(
                text(var, "valueFrom.resourceFieldRef.divisor"),
                "1",
                "{name}"
            );
            let limit = text(container, "resources.limits.cpu");
            let cpus = match limit.strip_suffix('m') {
                Some(milli) => milli.parse::<u64>().expect("millicores").div_ceil(1000),
                None => limit.parse::<u64>().expect("whole CPUs"),
            };
            (name, cpus.to_string())
        })
        .collect()
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(future)
}

#[test]
fn the_file_based_deployments_run_as_written_and_take_in_a_configmap_update() {
    for kustomization in ["base", "redis"] {
        let docs = documents(&render(kustomization));
        let container = ratelimitd_container(&docs);
        let config = config_yaml(object(&docs, "ConfigMap", "ratelimitd-config"));
        let mount = list(container, "volumeMounts")
            .iter()
            .find(|m| text(m, "name") == "config")
            .expect("the config mount");
        let mount_path = text(mount, "mountPath");
        assert_eq!(
            strings(container, "command"),
            ["/usr/local/bin/ratelimitd"],
            "{kustomization}"
        );

        let mut volume = ConfigMapVolume::new(&[("config.yaml", config)]);
        let volume_path = volume.path().to_str().expect("UTF-8 path").to_string();
        let mut args: Vec<String> = strings(container, "args")
            .into_iter()
            .map(|arg| {
                if arg == mount_path {
                    volume_path.clone()
                } else {
                    arg
                }
            })
            .collect();
        assert_eq!(args[0], "serve", "{kustomization}");
        assert!(
            args.contains(&volume_path),
            "{kustomization}: --config names the mount"
        );
        assert!(
            !args
                .iter()
                .any(|a| a == "--grpc-addr" || a == "--http-addr"),
            "{kustomization}: the ports are the defaults the probes and the Service name"
        );

        let mut check = command();
        check.args(["check", "--config", &volume_path]);
        let (status, stdout, stderr) = run_to_end(check, TIMEOUT);
        assert!(status.success(), "{kustomization}: check: {stdout}{stderr}");

        let redis = args
            .iter()
            .any(|a| a == "--redis-url")
            .then(RedisServer::start);
        if let Some(redis) = &redis {
            args = with_flag(args, "--redis-url", &redis.url());
        }
        args = with_flag(args, "--grpc-addr", "127.0.0.1:0");
        args = with_flag(args, "--http-addr", "127.0.0.1:0");
        let mut cmd = command();
        cmd.args(&args).envs(environment(container));
        let mut server = Ratelimitd::spawn(cmd);

        for probe in ["readinessProbe", "livenessProbe"] {
            assert_eq!(integer(container, &format!("{probe}.grpc.port")), 8081);
            let service = text(container, &format!("{probe}.grpc.service"));
            let mut health = command();
            health.args(["health", "--grpc-addr", &server.grpc_addr().to_string()]);
            health.args(["--service", service]);
            let (status, stdout, stderr) = run_to_end(health, TIMEOUT);
            assert!(
                status.success(),
                "{kustomization}: the {probe}'s service {service:?}: {stdout}{stderr}"
            );
        }

        let before = "requests_per_unit: 1000\n";
        assert_eq!(
            config.matches(before).count(),
            1,
            "one limit of 1000 to change"
        );
        volume.update(&[(
            "config.yaml",
            &config.replace(before, "requests_per_unit: 999\n"),
        )]);
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let (code, rules) = block_on(http_get(server.http_addr(), "/rlconfig"));
            assert_eq!(code, 200);
            if rules.contains("edge.api_key_free: unit=HOUR requests_per_unit=999") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{kustomization}: the updated ConfigMap was not loaded within {TIMEOUT:?}:\n{rules}\n{}",
                server.output()
            );
            std::thread::sleep(Duration::from_millis(200));
        }

        server.terminate();
        let status = server.wait_exit(TIMEOUT);
        assert!(
            status.is_some_and(|s| s.success()),
            "{kustomization}: SIGTERM should end it cleanly ({status:?}): {}",
            server.output()
        );
    }
}

#[test]
fn every_variable_set_is_one_ratelimitd_answers_and_the_xds_example_runs_upstreams_command() {
    let mut help = command();
    help.args(["serve", "--help-all"]);
    let (status, serve_help, _) = run_to_end(help, TIMEOUT);
    assert!(status.success());
    for kustomization in KUSTOMIZATIONS {
        let docs = documents(&render(kustomization));
        for (name, _) in environment(ratelimitd_container(&docs)) {
            if name.starts_with("RATELIMITD_") {
                assert!(
                    serve_help.contains(&format!("[env: {name}=")),
                    "{kustomization}: ratelimitd serve reads no {name}"
                );
            } else {
                assert!(
                    ratelimitd::envoyproxy_env::VARIABLES.contains(&name.as_str()),
                    "{kustomization}: {name} is none of envoyproxy/ratelimit's variables"
                );
            }
        }
    }

    let docs = documents(&render("xds"));
    let container = ratelimitd_container(&docs);
    assert_eq!(strings(container, "command"), ["/bin/ratelimit"]);
    assert!(
        try_at(container, "args").is_none(),
        "drop-in mode takes no arguments"
    );
    let dockerfile = fs::read_to_string(repo_root().join("Dockerfile")).expect("Dockerfile");
    assert!(
        dockerfile.contains("ln -s /usr/local/bin/ratelimitd /bin/ratelimit"),
        "the image must run ratelimitd as /bin/ratelimit"
    );
    let env = environment(container);
    let value = |name: &str| {
        env.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("{name} is not set"))
    };
    assert_eq!(value("CONFIG_TYPE"), "GRPC_XDS_SOTW");
    for file in [
        "GRPC_SERVER_TLS_CERT",
        "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
        "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
    ] {
        let mounted = list(container, "volumeMounts")
            .iter()
            .any(|m| Path::new(value(file)).starts_with(text(m, "mountPath")));
        assert!(mounted, "{file}={} is on no mounted volume", value(file));
    }
    for probe in ["readinessProbe", "livenessProbe"] {
        assert!(
            try_at(container, &format!("{probe}.grpc")).is_none(),
            "the gRPC port speaks TLS, which the kubelet's gRPC probe does not"
        );
    }
    assert_eq!(
        text(container, "readinessProbe.httpGet.path"),
        "/healthcheck"
    );
    assert_eq!(text(container, "livenessProbe.tcpSocket.port"), "http");
}

#[test]
fn pods_run_as_the_images_user_read_only_bounded_and_drain_within_their_grace() {
    let uid = dockerfile_uid();
    for kustomization in KUSTOMIZATIONS {
        let docs = documents(&render(kustomization));
        let deployment = object(&docs, "Deployment", "ratelimitd");
        let pod = at(deployment, "spec.template.spec");
        assert_eq!(
            at(pod, "securityContext.runAsNonRoot").as_bool(),
            Some(true)
        );
        assert_eq!(
            integer(pod, "securityContext.runAsUser"),
            uid,
            "{kustomization}"
        );
        let container = ratelimitd_container(&docs);
        assert_eq!(
            at(container, "securityContext.readOnlyRootFilesystem").as_bool(),
            Some(true)
        );
        for resource in ["requests.cpu", "requests.memory", "limits.memory"] {
            at(container, &format!("resources.{resource}"));
        }

        let pause = integer(container, "lifecycle.preStop.sleep.seconds");
        let grace = integer(pod, "terminationGracePeriodSeconds");
        assert!(
            pause + DRAIN_SECONDS < grace,
            "{kustomization}: a grace of {grace} s must outlast the {pause} s pause and the \
             {DRAIN_SECONDS} s drain"
        );

        let labels = at(deployment, "spec.template.metadata.labels");
        for (kind, selector) in [
            ("Service", "spec.selector"),
            ("PodDisruptionBudget", "spec.selector.matchLabels"),
        ] {
            let selector = at(object(&docs, kind, "ratelimitd"), selector);
            let mapping = selector.as_mapping().expect("a selector");
            assert!(!mapping.is_empty());
            for (key, value) in mapping {
                assert_eq!(
                    labels.as_mapping_get(key.as_str().expect("a label")),
                    Some(value),
                    "{kustomization}: the {kind} selects the pods"
                );
            }
        }
        let ports: BTreeSet<&str> = list(container, "ports")
            .iter()
            .map(|p| text(p, "name"))
            .collect();
        for port in list(object(&docs, "Service", "ratelimitd"), "spec.ports") {
            assert!(ports.contains(text(port, "targetPort")), "{kustomization}");
        }
    }
}
