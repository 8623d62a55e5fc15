//! Simulator benchmark: 1,000 ControlPlanes (8 services each) upgrading
//! 2026.1 → 2026.2 at once in the in-memory world, followed to completion
//! by lockstep's tracker. Prints wall time, events and reconcile passes per
//! second, and peak RSS. Asserts nothing about the figures.
//!
//! Run: `cargo bench --bench sim`.

use std::time::Instant;

use lockstep::follow::{Progress, assess};
use lockstep::kind::{Key, Kind};
use lockstep::release::ImageRef;
use lockstep::sim::{Params, World};

fn img(svc: &str, tag: &str) -> ImageRef {
    ImageRef::new(Some(&format!("ghcr.io/c5c3/{svc}")), Some(tag), None).unwrap()
}

fn peak_rss_mib() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    u.ru_maxrss as f64 / 1024.0
}

fn main() {
    for planes in [100usize, 1000] {
        let t0 = Instant::now();
        let mut w = World::new(Params::default());
        let mut children = Vec::new();
        for i in 0..planes {
            let ns = format!("cloud-{i:04}");
            let plane = Key::new(Kind::ControlPlane, ns.clone(), format!("p{i:04}"));
            w.install_plane(plane.clone(), "2026.1".into());
            let mut kids = Vec::new();
            for kind in Kind::SERVICES {
                let key = Key::new(kind, ns.clone(), format!("p{i:04}-{}", kind.service()));
                let rel = (kind.release_source() == lockstep::kind::ReleaseSource::Field)
                    .then(|| "2026.1".to_owned());
                w.install_steady(
                    key.clone(),
                    rel,
                    img(kind.service(), "2026.1"),
                    Some(plane.clone()),
                );
                kids.push(key);
            }
            children.push((plane, kids));
        }
        let built = t0.elapsed();
        let t1 = Instant::now();
        for (plane, kids) in &children {
            let images: Vec<(Key, ImageRef)> = kids
                .iter()
                .map(|k| (k.clone(), img(k.kind.service(), "2026.2")))
                .collect();
            w.apply_plane(plane, "2026.2", &images).unwrap();
        }
        let all: Vec<Key> = children.iter().flat_map(|(_, k)| k.clone()).collect();
        let done = w.run_until(|w| {
            all.iter().all(|k| {
                w.observe(k)
                    .is_some_and(|o| assess("2026.2", &o) == Progress::Complete)
            })
        });
        let wall = t1.elapsed();
        println!(
            "{planes} planes ({} objects): setup {:.2} s; hop simulated in {:.2} s wall ({}m{:02}s virtual), complete: {done}; {} events ({:.0}/s), {} reconcile passes ({:.0}/s); peak RSS {:.1} MiB",
            all.len(),
            built.as_secs_f64(),
            wall.as_secs_f64(),
            w.now.as_secs() / 60,
            w.now.as_secs() % 60,
            w.events.len(),
            w.events.len() as f64 / wall.as_secs_f64(),
            w.passes,
            w.passes as f64 / wall.as_secs_f64(),
            peak_rss_mib()
        );
    }
}
