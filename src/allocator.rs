//! How the binary's allocator (mimalloc, `src/main.rs`) gives memory back.
//!
//! Measured with `cargo bench --bench daemon` on the 5,000-file fleet, the
//! same build with and without (docs/performance.md, "The daemon"): peak RSS
//! 160–168 MiB idle and 181–186 MiB after pushes with mimalloc's defaults,
//! 131 MiB and 149–156 MiB with both settings below, start-up and
//! push-to-status unchanged. The heap itself is about 86 MiB either way;
//! the difference is freed memory the process kept resident:
//!
//! - mimalloc v3 waits a whole second before it returns freed pages to the
//!   OS, so the judgment's short-lived parse trees are still resident when
//!   the long-lived state is built, and count in the peak. v2 waited 10 ms;
//!   so do we.
//! - With transparent huge pages a freed range is returned only as whole
//!   2 MiB pages. The daemon holds many small objects, so few ranges ever
//!   free up whole.

/// mimalloc v3's `mi_option_purge_delay` (its `mimalloc.h`, the pinned
/// libmimalloc-sys 0.1.49 does not name it). The test below checks that
/// this index reads that option's documented default.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
/// What `MIMALLOC_PURGE_DELAY` defaults to in mimalloc v3, in milliseconds.
const V3_DEFAULT_PURGE_DELAY: std::ffi::c_long = 1000;
const PURGE_DELAY_MS: std::ffi::c_long = 10;

/// Applies the settings above unless the environment already chose
/// (`MIMALLOC_PURGE_DELAY`, `MIMALLOC_ALLOW_THP`, read by mimalloc itself).
/// Call first thing in `main`; it only sets process-wide flags.
pub fn tune() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: mimalloc's options are plain integers it reads on each
        // purge; setting one is allowed at any time.
        unsafe {
            // Only where the index means what we think: another mimalloc
            // would read a different default there (then leave it alone).
            if libmimalloc_sys::mi_option_get(PURGE_DELAY) == V3_DEFAULT_PURGE_DELAY {
                libmimalloc_sys::mi_option_set(PURGE_DELAY, PURGE_DELAY_MS);
            }
        }
    }
    #[cfg(target_os = "linux")]
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        // The kernel's own switch rather than mimalloc's option: it holds
        // whether the host's THP mode is `always` or `madvise`, and for
        // every allocator in the process. A failure (an old kernel) only
        // leaves things as they were.
        // SAFETY: PR_SET_THP_DISABLE takes integers and touches no memory.
        unsafe {
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_delay_index_reads_the_purge_delay() {
        // The test process runs on the system allocator, but mimalloc's
        // options are readable all the same.
        let got = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) };
        match std::env::var("MIMALLOC_PURGE_DELAY") {
            Ok(v) => assert_eq!(Some(got), v.trim().parse().ok()),
            Err(_) => assert_eq!(
                got, V3_DEFAULT_PURGE_DELAY,
                "option {PURGE_DELAY} is not mimalloc's purge_delay: a mimalloc update moved it"
            ),
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn tune_turns_transparent_huge_pages_off_for_the_process() {
        // In a child, so that this test process's flags stay as they were.
        let exe = std::env::current_exe().expect("test binary");
        if std::env::var_os("LOCKSTEP_TUNE_CHILD").is_some() {
            tune();
            let off = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
            std::process::exit(if off == 1 { 0 } else { 3 });
        }
        let status = std::process::Command::new(exe)
            .args([
                "--exact",
                "allocator::tests::tune_turns_transparent_huge_pages_off_for_the_process",
                "--nocapture",
            ])
            .env("LOCKSTEP_TUNE_CHILD", "1")
            .env_remove("MIMALLOC_ALLOW_THP")
            .status()
            .expect("child");
        assert!(status.success(), "THP still allowed after tune(): {status}");
    }
}
