//! The race against Flux: lockstep and Flux's source-controller +
//! kustomize-controller, one after the other, each against a fresh
//! kube-apiserver (tests/peers/kube, with the upstream C5C3 CRDs and Flux's
//! own) seeded with the same fleet, reading the same repository over
//! smart HTTP (`git http-backend` behind the small CGI server of
//! `support/http_git.rs`), triggered the same way: a one-file hop is pushed
//! and the tool is told at once (lockstep: a signed GitHub push event to its
//! webhook; Flux: the `reconcile.fluxcd.io/requestedAt` annotation on the
//! GitRepository, which is exactly what Flux's `Receiver` writes on a
//! webhook: notification-controller, which serves Receivers, cannot be built
//! here, see tests/peers/flux/README.md).
//!
//! It measures, per fleet size (500 and 5,000 files; `-- --quick`: 500):
//! - push → the hop's object updated in the API server: from the trigger
//!   (sent right after `git push` returns) to the watch event that shows the
//!   Nova's `spec.openStackRelease` at the new release (median of the pushes);
//! - idle: CPU share and RSS over 30 s after the first sync settled;
//! - during the syncs: CPU seconds per sync and peak RSS (the peak reset
//!   before the first push, `/proc/<pid>/clear_refs`);
//! - the API server's (kube-apiserver + etcd) CPU per sync, which each
//!   tool causes.
//!
//! Flux's figures are its two processes added up. Then the ratios
//! Flux / lockstep (above 1: lockstep ahead). lockstep judges every commit
//! before applying it; Flux applies whatever the branch holds.
//!
//! The fleet is standalone services only (Novas and digest-pinned Glances,
//! `support/fleet.rs`; without the Glances' backends, for which the upstream
//! CRDs have no definition), installed and Ready before
//! either tool starts (seeded through the API server, status written as the
//! operator would): no operator runs, so a ControlPlane's children would
//! never appear. Flux gets a GitRepository and a Kustomization (no prune,
//! path the repository's root, intervals of an hour: only the trigger
//! syncs); lockstep runs `run --cluster-mode kube --url http://...` with
//! polls of an hour.
//!
//! Run: `cargo bench --bench race` (`-- --quick`: 500 files only). Needs
//! the kube peer (tests/peers/install.sh), the C5C3 CRDs (../shared or
//! `LOCKSTEP_SHARED`) and Flux, built on first use by
//! `tests/peers/flux/build.sh` (cached in ~/.cache/lockstep-flux; about
//! 25 minutes on 2 cores) unless `SOURCE_CONTROLLER_BIN`,
//! `KUSTOMIZE_CONTROLLER_BIN` and `FLUX_CRDS` are set. Knobs:
//! `LOCKSTEP_BENCH_PUSHES=N` (default 5), `LOCKSTEP_BENCH_IDLE=SECONDS`
//! (default 30), `LOCKSTEP_BENCH_RACE=lockstep` or `flux` (one side only),
//! `LOCKSTEP_BENCH_FILES=500,5000`, `LOCKSTEP_BENCH_KEEP=DIR` (keep the
//! logs), `LOCKSTEP_BENCH_LOG_LEVEL=debug` (lockstep's log level). It asserts nothing about the figures.

#[path = "support/fleet.rs"]
mod fleet;
#[path = "support/hook.rs"]
mod hook;
#[path = "support/http_git.rs"]
mod http_git;
#[path = "support/measure.rs"]
mod measure;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, WatchEvent, WatchParams,
};
use measure::{Cost, Phase, median, ratio};
use serde_json::{Value, json};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const FLUX_NS: &str = "flux-system";

fn shared_crds() -> PathBuf {
    let shared = std::env::var_os("LOCKSTEP_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(ROOT).join("../shared"));
    let dir = shared.join("fixtures/crds");
    assert!(
        std::fs::read_dir(&dir).is_ok_and(|d| d
            .flatten()
            .any(|e| e.path().extension().is_some_and(|x| x == "yaml"))),
        "the race needs the upstream C5C3 CRDs in {} (set LOCKSTEP_SHARED)",
        dir.display()
    );
    dir
}

/// Flux's binaries and CRDs: from the environment, else tests/peers/flux/build.sh.
struct Flux {
    source: PathBuf,
    kustomize: PathBuf,
    crds: PathBuf,
}

fn flux() -> Flux {
    let var = |k: &str| std::env::var_os(k).map(PathBuf::from);
    if let (Some(source), Some(kustomize), Some(crds)) = (
        var("SOURCE_CONTROLLER_BIN"),
        var("KUSTOMIZE_CONTROLLER_BIN"),
        var("FLUX_CRDS"),
    ) {
        return Flux {
            source,
            kustomize,
            crds,
        };
    }
    let t = Instant::now();
    let out = Command::new("bash")
        .arg(Path::new(ROOT).join("tests/peers/flux/build.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("tests/peers/flux/build.sh runs");
    assert!(out.status.success(), "tests/peers/flux/build.sh failed");
    let text = String::from_utf8_lossy(&out.stdout);
    let get = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .map(PathBuf::from)
            .unwrap_or_else(|| panic!("build.sh printed no {k}: {text}"))
    };
    if t.elapsed() > Duration::from_secs(5) {
        println!("flux: built in {:.0}s", t.elapsed().as_secs_f64());
    }
    Flux {
        source: get("SOURCE_CONTROLLER_BIN"),
        kustomize: get("KUSTOMIZE_CONTROLLER_BIN"),
        crds: get("FLUX_CRDS"),
    }
}

/// A fresh etcd + kube-apiserver with the C5C3 CRDs and Flux's.
struct ApiServer {
    dir: PathBuf,
}

impl ApiServer {
    fn start(dir: &Path, flux_crds: Option<&Path>) -> ApiServer {
        let peer = Path::new(ROOT).join("tests/peers/kube");
        let st = Command::new("bash")
            .arg(peer.join("start.sh"))
            .arg(dir)
            .arg("--crds")
            .arg(shared_crds())
            .stdout(Stdio::null())
            .status()
            .expect("start.sh");
        assert!(st.success(), "the API server did not start");
        let server = ApiServer {
            dir: dir.to_owned(),
        };
        let subs: &[&str] = match flux_crds {
            Some(_) => &["source-controller", "kustomize-controller"],
            None => &[],
        };
        for sub in subs {
            let st = Command::new("bash")
                .arg(peer.join("install-crds.sh"))
                .arg(dir)
                .arg(flux_crds.expect("flux CRDs").join(sub))
                .status()
                .expect("install-crds.sh");
            assert!(st.success(), "Flux's CRDs ({sub}) were not installed");
        }
        server
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    fn pids(&self) -> Vec<u32> {
        ["kube-apiserver", "etcd"]
            .iter()
            .filter_map(|n| {
                std::fs::read_to_string(self.dir.join(format!("{n}.pid")))
                    .ok()?
                    .trim()
                    .parse()
                    .ok()
            })
            .collect()
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(Path::new(ROOT).join("tests/peers/kube/stop.sh"))
            .arg(&self.dir)
            .stderr(Stdio::null())
            .status();
    }
}

/// A child killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

async fn client(kubeconfig: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("kubeconfig");
    kube::Client::try_from(config).expect("client")
}

fn resource(api_version: &str, kind: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let lower = kind.to_ascii_lowercase();
    let plural = match lower.strip_suffix('y') {
        Some(stem) => format!("{stem}ies"),
        None => format!("{lower}s"),
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), &plural)
}

fn dynamic(c: &kube::Client, api_version: &str, kind: &str, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(c.clone(), ns, &resource(api_version, kind))
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            files_under(&p, out);
        } else if p.extension().is_some_and(|x| x == "yaml") {
            out.push(p);
        }
    }
}

/// The fleet in the cluster as if it had been installed long ago: every
/// document applied as lockstep applies it (server-side, manager
/// `lockstep`), every service's status installed and Ready at its
/// generation, as the operator writes it.
async fn seed(c: &kube::Client, work: &Path, standalone: usize) {
    let ns: Api<Namespace> = Api::all(c.clone());
    for name in fleet::standalone_namespaces(standalone)
        .into_iter()
        .chain([FLUX_NS.to_owned()])
    {
        ns.patch(
            &name,
            &PatchParams::apply("bench").force(),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
            ),
        )
        .await
        .expect("namespace");
    }
    let mut files = Vec::new();
    files_under(&work.join("standalone"), &mut files);
    let docs: Vec<Value> = files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).expect("read");
            serde_saphyr::from_multiple::<Value>(&text).expect("yaml")
        })
        .collect();
    futures::stream::iter(docs)
        .map(|doc| async move {
            let (av, kind) = (
                doc["apiVersion"].as_str().expect("apiVersion"),
                doc["kind"].as_str().expect("kind"),
            );
            let (name, ns) = (
                doc["metadata"]["name"].as_str().expect("name"),
                doc["metadata"]["namespace"].as_str().expect("namespace"),
            );
            let api = dynamic(c, av, kind, ns);
            let o = api
                .patch(
                    name,
                    &PatchParams::apply("lockstep").force(),
                    &Patch::Apply(&doc),
                )
                .await
                .unwrap_or_else(|e| panic!("seeding {kind} {ns}/{name}: {e}"));
            if let Some(release) = doc["spec"]["openStackRelease"].as_str() {
                let generation = o.metadata.generation.unwrap_or(1);
                api.patch_status(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {
                        "observedGeneration": generation,
                        "installedRelease": release,
                        "conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
                            "message": "installed", "lastTransitionTime": "2026-01-01T00:00:00Z",
                            "observedGeneration": generation}],
                    }})),
                )
                .await
                .unwrap_or_else(|e| panic!("status of {kind} {ns}/{name}: {e}"));
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
}

fn nova_api(c: &kube::Client, i: usize) -> (Api<DynamicObject>, String) {
    (
        dynamic(
            c,
            "nova.openstack.c5c3.io/v1alpha1",
            "Nova",
            &format!("compute-{:03}", i % 300),
        ),
        format!("nova-{i:05}"),
    )
}

/// The side under test: how to start it, tell it of a push, and know it
/// has finished with one.
trait Side {
    fn name(&self) -> &'static str;
    fn pids(&self) -> Vec<u32>;
    /// Waits until the first sync (of commit `root`) is over.
    async fn ready(&self, c: &kube::Client, root: &str);
    /// Tells the side that `sha` was pushed (the n-th push).
    async fn trigger(&self, c: &kube::Client, sha: &str, n: usize);
    /// Waits until the side is done with `sha`.
    async fn settled(&self, c: &kube::Client, sha: &str);
}

struct Lockstep {
    proc: Proc,
    cache: PathBuf,
    hook: u16,
    metrics: u16,
    secret: String,
}

/// lockstep's log level (`LOCKSTEP_BENCH_LOG_LEVEL`, default `info`):
/// `debug` logs each pass's times, for profiling a start-up.
fn log_level() -> String {
    std::env::var("LOCKSTEP_BENCH_LOG_LEVEL").unwrap_or_else(|_| "info".into())
}

impl Lockstep {
    fn start(url: &str, kubeconfig: &Path, tmp: &Path, logs: &Path) -> Lockstep {
        let secret = "race-secret".to_owned();
        let secret_file = tmp.join("secret");
        std::fs::write(&secret_file, &secret).expect("write");
        let cache = tmp.join("lockstep-cache");
        let (hook, metrics) = (free_port(), free_port());
        let child = Command::new(env!("CARGO_BIN_EXE_lockstep"))
            .args(["run", "--url", url])
            .arg("--cache-dir")
            .arg(&cache)
            .args(["--cluster-mode", "kube", "--kubeconfig"])
            .arg(kubeconfig)
            .args([
                "--cluster-name",
                "race",
                "--report",
                "notes",
                "--poll",
                "1h",
            ])
            .args(["--listen", &format!("127.0.0.1:{hook}")])
            .args(["--metrics-listen", &format!("127.0.0.1:{metrics}")])
            .arg("--github-webhook-secret-file")
            .arg(&secret_file)
            .args(["--log-level", &log_level(), "--log-format", "json"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(logs.join("lockstep.log")).expect("log"))
            .spawn()
            .expect("lockstep run");
        Lockstep {
            proc: Proc(child),
            cache,
            hook,
            metrics,
            secret,
        }
    }

    fn metric(&self, name: &str) -> f64 {
        hook::get(self.metrics, "/metrics")
            .map(|m| hook::metric(&m, name))
            .unwrap_or(0.0)
    }

    fn noted(&self, sha: &str) -> bool {
        hook::mirror(&self.cache).is_some_and(|r| hook::has_note(&r, sha))
    }
}

impl Side for Lockstep {
    fn name(&self) -> &'static str {
        "lockstep"
    }

    fn pids(&self) -> Vec<u32> {
        vec![self.proc.0.id()]
    }

    async fn ready(&self, _: &kube::Client, root: &str) {
        let deadline = Instant::now() + Duration::from_secs(1800);
        // The verdict on the fleet, then the pass that read every unit.
        while !(self.noted(root)
            && self.metric("lockstep_reconcile_pass_duration_seconds_count") >= 1.0)
        {
            assert!(Instant::now() < deadline, "lockstep: no first pass");
            assert!(
                measure::alive(self.proc.0.id()),
                "lockstep exited (its log: lockstep.log, kept with LOCKSTEP_BENCH_KEEP=DIR)"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let applied = self.metric("lockstep_hops_applied_total");
        assert_eq!(
            applied, 0.0,
            "lockstep applied {applied} hops at start: the seeded fleet should be installed"
        );
    }

    async fn trigger(&self, _: &kube::Client, sha: &str, n: usize) {
        assert!(
            hook::post_push(self.hook, &self.secret, sha, n),
            "lockstep's webhook refused the push"
        );
    }

    async fn settled(&self, _: &kube::Client, sha: &str) {
        let deadline = Instant::now() + Duration::from_secs(600);
        while !self.noted(sha) {
            assert!(Instant::now() < deadline, "lockstep: no verdict on {sha}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

struct FluxSide {
    source: Proc,
    kustomize: Proc,
}

const GITREPO: (&str, &str) = ("source.toolkit.fluxcd.io/v1", "GitRepository");
const KS: (&str, &str) = ("kustomize.toolkit.fluxcd.io/v1", "Kustomization");

impl FluxSide {
    async fn start(
        flux: &Flux,
        c: &kube::Client,
        url: &str,
        kubeconfig: &Path,
        tmp: &Path,
        logs: &Path,
    ) -> FluxSide {
        let storage_port = free_port();
        let storage = tmp.join("flux-storage");
        std::fs::create_dir_all(&storage).expect("mkdir");
        let spawn = |bin: &Path, log: &str, extra: Vec<String>| {
            Proc(
                Command::new(bin)
                    .args([
                        "--watch-all-namespaces=true".to_owned(),
                        "--enable-leader-election=false".to_owned(),
                        format!("--metrics-addr=127.0.0.1:{}", free_port()),
                        format!("--health-addr=127.0.0.1:{}", free_port()),
                        "--events-addr=".to_owned(),
                        "--log-level=info".to_owned(),
                    ])
                    .args(extra)
                    .env("KUBECONFIG", kubeconfig)
                    .env("RUNTIME_NAMESPACE", FLUX_NS)
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(logs.join(log)).expect("log"))
                    .spawn()
                    .unwrap_or_else(|e| panic!("{}: {e}", bin.display())),
            )
        };
        let source = spawn(
            &flux.source,
            "source-controller.log",
            vec![
                format!("--storage-path={}", storage.display()),
                format!("--storage-addr=127.0.0.1:{storage_port}"),
                format!("--storage-adv-addr=127.0.0.1:{storage_port}"),
            ],
        );
        let kustomize = spawn(&flux.kustomize, "kustomize-controller.log", vec![]);
        let (av, kind) = GITREPO;
        dynamic(c, av, kind, FLUX_NS)
            .patch(
                "fleet",
                &PatchParams::apply("bench").force(),
                &Patch::Apply(json!({
                    "apiVersion": av, "kind": kind,
                    "metadata": {"name": "fleet", "namespace": FLUX_NS},
                    "spec": {"interval": "60m", "timeout": "10m", "url": url, "ref": {"branch": "main"}},
                })),
            )
            .await
            .expect("GitRepository");
        let (av, kind) = KS;
        dynamic(c, av, kind, FLUX_NS)
            .patch(
                "fleet",
                &PatchParams::apply("bench").force(),
                &Patch::Apply(json!({
                    "apiVersion": av, "kind": kind,
                    "metadata": {"name": "fleet", "namespace": FLUX_NS},
                    "spec": {"interval": "60m", "timeout": "30m", "path": "./", "prune": false,
                             "sourceRef": {"kind": "GitRepository", "name": "fleet"}},
                })),
            )
            .await
            .expect("Kustomization");
        FluxSide { source, kustomize }
    }

    /// The Kustomization's last applied revision (`main@sha1:<sha>`).
    async fn applied(&self, c: &kube::Client) -> String {
        let (av, kind) = KS;
        dynamic(c, av, kind, FLUX_NS)
            .get_opt("fleet")
            .await
            .ok()
            .flatten()
            .and_then(|o| {
                o.data["status"]["lastAppliedRevision"]
                    .as_str()
                    .map(str::to_owned)
            })
            .unwrap_or_default()
    }

    async fn wait_applied(&self, c: &kube::Client, sha: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.applied(c).await.ends_with(sha) {
            for (p, name) in [(&self.source, "source"), (&self.kustomize, "kustomize")] {
                assert!(
                    measure::alive(p.0.id()),
                    "{name}-controller exited (its log: {name}-controller.log, kept with LOCKSTEP_BENCH_KEEP=DIR)"
                );
            }
            assert!(
                Instant::now() < deadline,
                "flux: {sha} not applied (last applied: {:?})",
                self.applied(c).await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Side for FluxSide {
    fn name(&self) -> &'static str {
        "flux"
    }

    fn pids(&self) -> Vec<u32> {
        vec![self.source.0.id(), self.kustomize.0.id()]
    }

    async fn ready(&self, c: &kube::Client, root: &str) {
        self.wait_applied(c, root, Duration::from_secs(1800)).await;
    }

    async fn trigger(&self, c: &kube::Client, _: &str, n: usize) {
        // What Flux's Receiver does on a webhook (notification-controller's
        // receiver handler): request a reconcile of the source now.
        let (av, kind) = GITREPO;
        dynamic(c, av, kind, FLUX_NS)
            .patch(
                "fleet",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {
                    "reconcile.fluxcd.io/requestedAt": format!("race-{n}-{}", jiff::Timestamp::now()),
                }}})),
            )
            .await
            .expect("requestedAt");
    }

    async fn settled(&self, c: &kube::Client, sha: &str) {
        self.wait_applied(c, sha, Duration::from_secs(1800)).await;
    }
}

/// One side's figures.
#[derive(Default)]
struct Figures {
    startup_s: f64,
    /// Process start to quiet (under 1 % of a core for 3 s).
    quiet_s: f64,
    idle: Cost,
    latencies: Vec<Duration>,
    sync: Cost,
    api_sync: Cost,
    pushes: usize,
}

struct Fleet {
    work: PathBuf,
    served: PathBuf,
    root: String,
    standalone: usize,
}

/// Back to the fleet commit: the work tree and the served branch.
fn reset(f: &Fleet) {
    fleet::git(&f.work, &["reset", "-q", "--hard", &f.root]);
    fleet::git(&f.work, &["push", "-q", "-f", "origin", "main"]);
}

fn env_usize(k: &str, default: usize) -> usize {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[allow(clippy::too_many_arguments)]
async fn race(
    which: &str,
    f: &Fleet,
    url: &str,
    flux_bins: Option<&Flux>,
    tmp: &Path,
    logs: &Path,
    pushes: usize,
    idle: u64,
) -> Figures {
    reset(f);
    let api_dir = tmp.join(format!("api-{which}"));
    let api = ApiServer::start(&api_dir, flux_bins.map(|x| x.crds.as_path()));
    let c = client(&api.kubeconfig()).await;
    let t = Instant::now();
    seed(&c, &f.work, f.standalone).await;
    println!(
        "  {which}: API server seeded with {} files in {:.1}s",
        f.standalone,
        t.elapsed().as_secs_f64()
    );
    let started = Instant::now();
    match which {
        "lockstep" => {
            let side = Lockstep::start(url, &api.kubeconfig(), tmp, logs);
            measure_side(&side, &c, &api, f, started, pushes, idle).await
        }
        _ => {
            let flux = flux_bins.expect("flux");
            let side = FluxSide::start(flux, &c, url, &api.kubeconfig(), tmp, logs).await;
            measure_side(&side, &c, &api, f, started, pushes, idle).await
        }
    }
}

/// When the API server shows `name` at `release`: watched from `rv` (the
/// version read before the push), the watch opened again from the last
/// version seen whenever the server ends it.
async fn shows_release(
    api: &Api<DynamicObject>,
    name: &str,
    mut rv: String,
    release: &str,
) -> Instant {
    let at = |o: &DynamicObject| o.data["spec"]["openStackRelease"] == release;
    loop {
        let wp = WatchParams::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(290);
        let mut events = api.watch(&wp, &rv).await.expect("watch").boxed();
        while let Ok(Some(ev)) = events.try_next().await {
            match ev {
                WatchEvent::Modified(o) | WatchEvent::Added(o) => {
                    if at(&o) {
                        return Instant::now();
                    }
                    rv = o.metadata.resource_version.clone().unwrap_or(rv);
                }
                WatchEvent::Bookmark(b) => rv = b.metadata.resource_version,
                WatchEvent::Error(_) | WatchEvent::Deleted(_) => break,
            }
        }
        // The watch ended (its timeout, or an error such as an expired
        // version): read the object, and watch again from there.
        let o = api.get(name).await.expect("get");
        if at(&o) {
            return Instant::now();
        }
        rv = o.metadata.resource_version.unwrap_or(rv);
    }
}

async fn measure_side(
    side: &impl Side,
    c: &kube::Client,
    api: &ApiServer,
    f: &Fleet,
    started: Instant,
    pushes: usize,
    idle: u64,
) -> Figures {
    let mut fig = Figures {
        pushes,
        ..Figures::default()
    };
    side.ready(c, &f.root).await;
    fig.startup_s = started.elapsed().as_secs_f64();
    // What the first sync left to do (statuses, caches) is not idleness:
    // idle starts once the side used under 1 % of a core for 3 s.
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let phase = Phase::start(&side.pids());
        tokio::time::sleep(Duration::from_secs(3)).await;
        let cost = phase.end();
        if cost.cpu_percent() < 1.0 || Instant::now() > deadline {
            fig.quiet_s = started.elapsed().as_secs_f64();
            break;
        }
    }
    let phase = Phase::start(&side.pids());
    tokio::time::sleep(Duration::from_secs(idle)).await;
    fig.idle = phase.end();

    let phase = Phase::start(&side.pids());
    let api_phase = Phase::start(&api.pids());
    for n in 0..pushes {
        let i = (n * 2) % f.standalone;
        fleet::hop_nova(&f.work, i);
        fleet::git(
            &f.work,
            &["commit", "-q", "-am", &format!("nova-{i:05} to 2026.2")],
        );
        let (nova, name) = nova_api(c, i);
        let rv = nova
            .get(&name)
            .await
            .expect("nova")
            .metadata
            .resource_version
            .expect("resourceVersion");
        fleet::git(&f.work, &["push", "-q", "origin", "main"]);
        let sha = fleet::git(&f.work, &["rev-parse", "HEAD"]);
        let t0 = Instant::now();
        side.trigger(c, &sha, n).await;
        let updated = tokio::time::timeout(
            Duration::from_secs(1800),
            shows_release(&nova, &name, rv, "2026.2"),
        )
        .await
        .unwrap_or_else(|_| panic!("{}: {name} never showed 2026.2", side.name()));
        fig.latencies.push(updated - t0);
        side.settled(c, &sha).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    fig.sync = phase.end();
    fig.api_sync = api_phase.end();
    fig
}

fn print_table(files: usize, us: &Figures, them: &Figures) {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let (ul, tl) = (median(&us.latencies), median(&them.latencies));
    let per = |c: &Cost, f: &Figures| c.cpu_s / f.pushes.max(1) as f64;
    let rows: Vec<(String, String, String, String)> = vec![
        (
            format!("push → object updated (median of {})", us.pushes),
            format!("{:.0} ms", ms(ul)),
            format!("{:.0} ms", ms(tl)),
            ratio(ms(ul), ms(tl)),
        ),
        (
            "  slowest".into(),
            format!(
                "{:.0} ms",
                ms(us.latencies.iter().copied().max().unwrap_or_default())
            ),
            format!(
                "{:.0} ms",
                ms(them.latencies.iter().copied().max().unwrap_or_default())
            ),
            String::new(),
        ),
        (
            "start to first sync done".into(),
            format!("{:.1} s", us.startup_s),
            format!("{:.1} s", them.startup_s),
            ratio(us.startup_s, them.startup_s),
        ),
        (
            "start to quiet (< 1 % CPU for 3 s)".into(),
            format!("{:.1} s", us.quiet_s),
            format!("{:.1} s", them.quiet_s),
            ratio(us.quiet_s, them.quiet_s),
        ),
        (
            format!("CPU idle ({:.0} s)", us.idle.wall_s),
            format!("{:.2} % of a core", us.idle.cpu_percent()),
            format!("{:.2} %", them.idle.cpu_percent()),
            measure::cpu_ratio(us.idle.cpu_s, them.idle.cpu_s),
        ),
        (
            "RSS idle".into(),
            format!("{:.0} MiB", us.idle.rss_mib),
            format!("{:.0} MiB", them.idle.rss_mib),
            ratio(us.idle.rss_mib, them.idle.rss_mib),
        ),
        (
            "CPU per sync".into(),
            format!("{:.3} s", per(&us.sync, us)),
            format!("{:.3} s", per(&them.sync, them)),
            measure::cpu_ratio(per(&us.sync, us), per(&them.sync, them)),
        ),
        (
            "peak RSS during the syncs".into(),
            format!("{:.0} MiB", us.sync.peak_mib),
            format!("{:.0} MiB", them.sync.peak_mib),
            ratio(us.sync.peak_mib, them.sync.peak_mib),
        ),
        (
            "API server CPU per sync".into(),
            format!("{:.3} s", per(&us.api_sync, us)),
            format!("{:.3} s", per(&them.api_sync, them)),
            measure::cpu_ratio(per(&us.api_sync, us), per(&them.api_sync, them)),
        ),
    ];
    println!("\n{files} files | lockstep | Flux (source + kustomize) | Flux / lockstep");
    println!("--- | --- | --- | ---");
    for (a, b, c, d) in rows {
        println!("{a} | {b} | {c} | {d}");
    }
    println!();
}

fn print_one(files: usize, name: &str, f: &Figures) {
    let mut l = f.latencies.clone();
    l.sort();
    println!(
        "{files} files, {name}: push → object updated median {:.0} ms (all: {:?}); start to first sync {:.1} s, to quiet {:.1} s; idle CPU {:.2} %, RSS {:.0} MiB; CPU per sync {:.3} s, peak RSS {:.0} MiB; API server CPU per sync {:.3} s",
        median(&l).as_secs_f64() * 1000.0,
        l.iter().map(|d| d.as_millis()).collect::<Vec<_>>(),
        f.startup_s,
        f.quiet_s,
        f.idle.cpu_percent(),
        f.idle.rss_mib,
        f.sync.cpu_s / f.pushes.max(1) as f64,
        f.sync.peak_mib,
        f.api_sync.cpu_s / f.pushes.max(1) as f64,
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let sizes: Vec<usize> = match std::env::var("LOCKSTEP_BENCH_FILES") {
        Ok(v) => v.split(',').filter_map(|s| s.trim().parse().ok()).collect(),
        Err(_) if quick => vec![500],
        Err(_) => vec![500, 5000],
    };
    let pushes = env_usize("LOCKSTEP_BENCH_PUSHES", 5);
    let idle = env_usize("LOCKSTEP_BENCH_IDLE", 30) as u64;
    let sides: Vec<String> = std::env::var("LOCKSTEP_BENCH_RACE")
        .map(|v| v.split(',').map(str::to_owned).collect())
        .unwrap_or_else(|_| vec!["lockstep".into(), "flux".into()]);
    let flux_bins = sides.iter().any(|s| s == "flux").then(flux);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    for files in sizes {
        let tmp = tempfile::tempdir().expect("tmp");
        let logs = match std::env::var_os("LOCKSTEP_BENCH_KEEP") {
            Some(d) => PathBuf::from(d).join(format!("race-{files}")),
            None => tmp.path().join("logs"),
        };
        std::fs::create_dir_all(&logs).expect("mkdir");
        let work = tmp.path().join("work");
        let served = tmp.path().join("served");
        std::fs::create_dir_all(&work).expect("mkdir");
        std::fs::create_dir_all(&served).expect("mkdir");
        fleet::git(&work, &["init", "-q", "-b", "main"]);
        let w = fleet::write_with(&work, 0, files, false);
        fleet::git(&work, &["add", "-A"]);
        fleet::git(&work, &["commit", "-q", "-m", "fleet"]);
        fleet::git(
            &served,
            &["init", "-q", "--bare", "-b", "main", "fleet.git"],
        );
        fleet::git(
            &work,
            &[
                "remote",
                "add",
                "origin",
                served.join("fleet.git").to_str().expect("utf-8"),
            ],
        );
        fleet::git(&work, &["push", "-q", "origin", "main"]);
        let f = Fleet {
            root: fleet::git(&work, &["rev-parse", "HEAD"]),
            work,
            served,
            standalone: files,
        };
        let http = http_git::GitHttp::start(&f.served);
        let url = http.url("fleet.git");
        println!(
            "race: {} files ({:.1} MiB), {pushes} pushes, idle {idle} s; served at {url} (git http-backend)",
            w.files,
            w.bytes as f64 / 1048576.0
        );
        let mut figures = Vec::new();
        for side in &sides {
            let fig = rt.block_on(race(
                side,
                &f,
                &url,
                flux_bins.as_ref(),
                tmp.path(),
                &logs,
                pushes,
                idle,
            ));
            print_one(files, side, &fig);
            figures.push((side.clone(), fig));
        }
        if let [(a, us), (b, them)] = &figures[..]
            && a == "lockstep"
            && b == "flux"
        {
            print_table(files, us, them);
        }
    }
}
