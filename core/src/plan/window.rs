//! Maintenance windows: when an upgrade plan may start new hops.
//!
//! A [`Window`](super::Window) opens at each time its five-field cron
//! expression names, in its IANA time zone, and stays open for its duration.
//! Everything here is pure: every function takes the instant it judges, never
//! reads a clock.
//!
//! # Cron
//!
//! `minute hour day-of-month month day-of-week`, separated by blanks:
//!
//! | field        | values                           |
//! |--------------|----------------------------------|
//! | minute       | 0-59                             |
//! | hour         | 0-23                             |
//! | day-of-month | 1-31                             |
//! | month        | 1-12 or JAN-DEC                  |
//! | day-of-week  | 0-7 (0 and 7: Sunday) or SUN-SAT |
//!
//! Each field is a list (`A,B-C`) of `*`, `N`, `A-B`, `*/S` or `A-B/S`;
//! names are case-insensitive. The parser is strict: ranges run forwards
//! (`FRI-MON` is refused, write `0,1,5,6` or `FRI-SAT,SUN-MON`), a step needs
//! `*` or a range (`5/15` is refused, write `5-59/15`), a step is at least 1
//! and no wider than the field, and a day-of-month that never occurs in the
//! months named (`0 0 30 2 *`) is refused. No `@daily`, `L`, `W`, `#` or `?`.
//!
//! Days follow Vixie cron: when both day-of-month and day-of-week are
//! restricted, a day matches if *either* does (`0 12 13 * 5`: the 13th and
//! every Friday). A field that begins with `*` (`*`, `*/2`) is not
//! restricted, and then both must match (`0 12 */2 * 5`: Fridays on odd
//! days), exactly as Vixie cron and cronie do.
//!
//! # Time zones and daylight saving time
//!
//! Cron matches wall-clock (civil) time in the window's zone; the duration is
//! elapsed time.
//!
//! - Spring forward (a gap): a start whose civil time does not exist that day
//!   is **skipped** that day. It does not move to after the gap (Vixie cron
//!   runs fixed-time jobs of a skipped hour just after the change; a
//!   maintenance window opening at a time nobody wrote would be a surprise).
//!   In America/New_York on 2027-03-14, `30 2 * * *` does not fire;
//!   `*/30 * * * *` fires at 01:30 EST and next at 03:00 EDT, thirty real
//!   minutes later. If every day matters, start away from the zone's
//!   changes (01:00-03:00 in most zones).
//! - Fall back (a fold): a start whose civil time occurs twice fires
//!   **once, at its first occurrence** (the earlier offset). In
//!   America/New_York on 2027-11-07, `30 1 * * *` fires at 01:30 EDT and not
//!   again at 01:30 EST. Every wall time of the repeated hour has fired in
//!   its first pass, so `*/30 * * * *` starts nothing during the second
//!   (05:00Z, 05:30Z, then 07:00Z); a window covers that hour only if an
//!   earlier occurrence lasts into it.
//! - The duration is absolute: a 4h window opening at 01:00 EDT on
//!   2027-11-07 closes at 04:00 EST, four real hours (three on the wall).
//!
//! # Occurrences
//!
//! Each cron match opens one occurrence `[start, start + duration)`.
//! Occurrences may overlap or touch (`0 * * * *` for 4h); the window is open
//! while any is. [`Schedule::open_at`] names the latest start at or before
//! the instant, [`Schedule::closes_at`] when that occurrence closes (a later
//! one may keep the window open past it). Searches look at most
//! [`SEARCH_DAYS`] ahead, so a window that opens only on February 29 may have
//! no next start.

use jiff::civil::{Date, DateTime, Time};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{SignedDuration, Span, Timestamp};
use thiserror::Error;

use super::Window;
use crate::duration::DurationError;

/// How far [`Schedule::next_start`] looks ahead, in days.
pub const SEARCH_DAYS: i64 = 400;

/// The longest a window may stay open.
pub const MAX_DURATION: SignedDuration = SignedDuration::from_hours(7 * 24);

/// The shortest window: the daemon looks at the clock once a pass, so a
/// window shorter than a pass could open and close between two (in virtual
/// time a rehearsal stepping a minute at a time would never land in it).
pub const MIN_DURATION_SECS: u64 = 5 * 60;

/// One of the five cron fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CronField {
    Minute,
    Hour,
    DayOfMonth,
    Month,
    DayOfWeek,
}

impl CronField {
    const ALL: [CronField; 5] = [
        CronField::Minute,
        CronField::Hour,
        CronField::DayOfMonth,
        CronField::Month,
        CronField::DayOfWeek,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CronField::Minute => "minute",
            CronField::Hour => "hour",
            CronField::DayOfMonth => "day-of-month",
            CronField::Month => "month",
            CronField::DayOfWeek => "day-of-week",
        }
    }

    /// Smallest and largest value written (day-of-week 7 is Sunday again).
    fn bounds(self) -> (u8, u8) {
        match self {
            CronField::Minute => (0, 59),
            CronField::Hour => (0, 23),
            CronField::DayOfMonth => (1, 31),
            CronField::Month => (1, 12),
            CronField::DayOfWeek => (0, 7),
        }
    }

    /// What `*` covers.
    fn star(self) -> (u8, u8) {
        match self {
            CronField::DayOfWeek => (0, 6),
            f => f.bounds(),
        }
    }

    /// Names, for the value of the first one.
    fn names(self) -> Option<(&'static [&'static str], u8, &'static str)> {
        const MONTHS: [&str; 12] = [
            "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
        ];
        const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
        match self {
            CronField::Month => Some((&MONTHS, 1, "a month name (JAN-DEC)")),
            CronField::DayOfWeek => Some((&DAYS, 0, "a day name (SUN-SAT)")),
            _ => None,
        }
    }
}

impl std::fmt::Display for CronField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a window does not parse. Messages name the field and the problem.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum WindowError {
    /// One window of a list ([`parse_all`]); `index` is its position in the
    /// list, the message counts from 1 (`window 1` is the first).
    #[error("window {}: {error}", .index + 1)]
    At {
        index: usize,
        error: Box<WindowError>,
    },
    #[error(
        "start {start:?}: expected 5 fields (minute hour day-of-month month day-of-week), found {found}"
    )]
    FieldCount { start: String, found: usize },
    #[error("start {start:?}: {field} {problem}")]
    Field {
        start: String,
        field: CronField,
        problem: String,
    },
    #[error("timeZone {0:?}: not a known IANA time zone")]
    TimeZone(String),
    #[error("timeZone {0:?}: write it as the IANA database does, {1:?}")]
    TimeZoneSpelling(String, String),
    #[error(
        "duration {0:?}: must be at least 5m, so that a pass of the daemon (every --poll, 30s by default; a minute of virtual time) always falls inside"
    )]
    ShortDuration(String),
    #[error("duration {0:?}: not a duration (90s, 15m, 4h)")]
    Duration(String),
    #[error("duration {0:?}: must be longer than zero")]
    ZeroDuration(String),
    #[error("duration {0:?}: longer than 7 days")]
    LongDuration(String),
}

/// One parsed window.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// Bit `v` set: value `v` matches (day-of-week: 0-6, Sunday 0).
    minutes: u64,
    hours: u64,
    doms: u64,
    months: u64,
    dows: u64,
    /// The field begins with `*` (Vixie cron's unrestricted day fields).
    dom_star: bool,
    dow_star: bool,
    duration: SignedDuration,
    tz: TimeZone,
    start: String,
}

/// A civil minute: the unit cron matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Cursor {
    date: Date,
    hour: u8,
    minute: u8,
}

impl Cursor {
    fn of(dt: DateTime) -> Cursor {
        Cursor {
            date: dt.date(),
            hour: u8::try_from(dt.hour()).unwrap_or(0),
            minute: u8::try_from(dt.minute()).unwrap_or(0),
        }
    }

    fn first(date: Date) -> Cursor {
        Cursor {
            date,
            hour: 0,
            minute: 0,
        }
    }

    fn last(date: Date) -> Cursor {
        Cursor {
            date,
            hour: 23,
            minute: 59,
        }
    }

    fn succ(self) -> Option<Cursor> {
        Some(if self.minute < 59 {
            Cursor {
                minute: self.minute + 1,
                ..self
            }
        } else if self.hour < 23 {
            Cursor {
                hour: self.hour + 1,
                minute: 0,
                ..self
            }
        } else {
            Cursor::first(self.date.tomorrow().ok()?)
        })
    }

    fn pred(self) -> Option<Cursor> {
        Some(if self.minute > 0 {
            Cursor {
                minute: self.minute - 1,
                ..self
            }
        } else if self.hour > 0 {
            Cursor {
                hour: self.hour - 1,
                minute: 59,
                ..self
            }
        } else {
            Cursor::last(self.date.yesterday().ok()?)
        })
    }

    fn datetime(self) -> Option<DateTime> {
        let time = Time::new(
            i8::try_from(self.hour).ok()?,
            i8::try_from(self.minute).ok()?,
            0,
            0,
        );
        Some(DateTime::from_parts(self.date, time.ok()?))
    }
}

fn bit(mask: u64, v: i8) -> bool {
    (0..64).contains(&v) && mask & (1u64 << v) != 0
}

/// The smallest set bit at or above `from`.
fn next_bit(mask: u64, from: u8) -> Option<u8> {
    if from >= 64 {
        return None;
    }
    let m = mask >> from;
    (m != 0).then(|| from + m.trailing_zeros() as u8)
}

/// The largest set bit at or below `from`.
fn prev_bit(mask: u64, from: u8) -> Option<u8> {
    let m = if from >= 63 {
        mask
    } else {
        mask & ((1u64 << (from + 1)) - 1)
    };
    (m != 0).then(|| 63 - m.leading_zeros() as u8)
}

impl Schedule {
    pub fn parse(w: &Window) -> Result<Schedule, WindowError> {
        let fields: Vec<&str> = w.start.split_ascii_whitespace().collect();
        let [minute, hour, dom, month, dow] = fields[..] else {
            return Err(WindowError::FieldCount {
                start: w.start.clone(),
                found: fields.len(),
            });
        };
        let mut masks = [0u64; 5];
        for ((field, text), mask) in CronField::ALL
            .into_iter()
            .zip([minute, hour, dom, month, dow])
            .zip(masks.iter_mut())
        {
            *mask = parse_field(field, text).map_err(|problem| WindowError::Field {
                start: w.start.clone(),
                field,
                problem,
            })?;
        }
        let [minutes, hours, doms, months, dows] = masks;
        let dom_star = dom.starts_with('*');
        let dow_star = dow.starts_with('*');
        // Both must match (a `*` field): some named day must exist in some
        // named month (February has 29 days in leap years).
        if dom_star || dow_star {
            const DAYS: [u8; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
            let possible = (1u8..=12).any(|m| {
                let last = DAYS[usize::from(m - 1)];
                months & (1 << m) != 0 && doms & ((1u64 << (last + 1)) - 2) != 0
            });
            if !possible {
                return Err(WindowError::Field {
                    start: w.start.clone(),
                    field: CronField::DayOfMonth,
                    problem: format!("{dom:?} never occurs in month {month:?}"),
                });
            }
        }
        let duration = parse_duration(&w.duration)?;
        let tz = zone(&w.time_zone)?;
        Ok(Schedule {
            minutes,
            hours,
            doms,
            months,
            dows,
            dom_star,
            dow_star,
            duration,
            tz,
            start: w.start.clone(),
        })
    }

    /// The cron expression, as written.
    pub fn start(&self) -> &str {
        &self.start
    }

    /// How long each occurrence stays open (elapsed time).
    pub fn duration(&self) -> SignedDuration {
        self.duration
    }

    pub fn time_zone(&self) -> &TimeZone {
        &self.tz
    }

    /// The window's start (the latest cron match at or before `at`, in the
    /// zone's civil time) if `at` lies inside `[start, start + duration)`.
    pub fn open_at(&self, at: Timestamp) -> Option<Timestamp> {
        let start = self.prev_start(at)?;
        (at < start.checked_add(self.duration).ok()?).then_some(start)
    }

    /// When the occurrence containing `at` closes, if open.
    pub fn closes_at(&self, at: Timestamp) -> Option<Timestamp> {
        self.open_at(at)?.checked_add(self.duration).ok()
    }

    /// The next start strictly after `at` (searching at most
    /// [`SEARCH_DAYS`] days of civil time).
    pub fn next_start(&self, at: Timestamp) -> Option<Timestamp> {
        let mut c = Cursor::of(self.tz.to_datetime(at));
        let end = Span::new()
            .try_days(SEARCH_DAYS)
            .and_then(|span| c.date.checked_add(span))
            .unwrap_or(Date::MAX);
        // Civil order is instant order (a fold counts once, at its first
        // occurrence), so the first match after `at` is the answer; starts in
        // a gap have no instant.
        loop {
            c = self.next_civil(c, end)?;
            if let Some(t) = self.instant(c)
                && t > at
            {
                return Some(t);
            }
            c = c.succ()?;
        }
    }

    /// The latest start at or before `at`, if later than `at - duration`.
    fn prev_start(&self, at: Timestamp) -> Option<Timestamp> {
        let not_before = at.checked_sub(self.duration).ok()?;
        let stop = self
            .tz
            .to_datetime(not_before)
            .date()
            .yesterday()
            .unwrap_or(Date::MIN);
        let mut c = self.upper(at);
        loop {
            c = self.prev_civil(c, stop)?;
            if let Some(t) = self.instant(c)
                && t <= at
            {
                return (t > not_before).then_some(t);
            }
            c = c.pred()?;
        }
    }

    /// The latest civil minute whose first occurrence can be at or before
    /// `at`. After a fall back the wall clock reads earlier than it did: at
    /// 01:10 EST, 01:30 EDT has passed. So take `at` under every offset in
    /// effect during the two days before it.
    fn upper(&self, at: Timestamp) -> Cursor {
        let mut best = Cursor::of(self.tz.to_datetime(at));
        let horizon = at
            .checked_sub(SignedDuration::from_hours(48))
            .unwrap_or(Timestamp::MIN);
        let after = at
            .checked_add(SignedDuration::from_nanos(1))
            .unwrap_or(Timestamp::MAX);
        for tr in self.tz.preceding(after) {
            if tr.timestamp() < horizon {
                break;
            }
            if let Ok(before) = tr.timestamp().checked_sub(SignedDuration::from_nanos(1)) {
                best = best.max(Cursor::of(self.tz.to_offset(before).to_datetime(at)));
            }
        }
        best
    }

    /// The instant of a civil start: none in a gap, the first in a fold.
    fn instant(&self, c: Cursor) -> Option<Timestamp> {
        let dt = c.datetime()?;
        match self.tz.to_ambiguous_timestamp(dt).offset() {
            AmbiguousOffset::Unambiguous { offset } => offset.to_timestamp(dt).ok(),
            AmbiguousOffset::Gap { .. } => None,
            AmbiguousOffset::Fold { before, .. } => before.to_timestamp(dt).ok(),
        }
    }

    fn month_matches(&self, d: Date) -> bool {
        bit(self.months, d.month())
    }

    fn day_matches(&self, d: Date) -> bool {
        let dom = bit(self.doms, d.day());
        let dow = bit(self.dows, d.weekday().to_sunday_zero_offset());
        if self.dom_star || self.dow_star {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// The first matching civil minute at or after `c`, on or before `end`.
    fn next_civil(&self, mut c: Cursor, end: Date) -> Option<Cursor> {
        while c.date <= end {
            if !self.month_matches(c.date) {
                c = Cursor::first(c.date.last_of_month().tomorrow().ok()?);
                continue;
            }
            if self.day_matches(c.date)
                && let Some(hour) = next_bit(self.hours, c.hour)
            {
                let from = if hour == c.hour { c.minute } else { 0 };
                if let Some(minute) = next_bit(self.minutes, from) {
                    return Some(Cursor { hour, minute, ..c });
                }
                if let (Some(hour), Some(minute)) =
                    (next_bit(self.hours, hour + 1), next_bit(self.minutes, 0))
                {
                    return Some(Cursor { hour, minute, ..c });
                }
            }
            c = Cursor::first(c.date.tomorrow().ok()?);
        }
        None
    }

    /// The last matching civil minute at or before `c`, on or after `stop`.
    fn prev_civil(&self, mut c: Cursor, stop: Date) -> Option<Cursor> {
        while c.date >= stop {
            if !self.month_matches(c.date) {
                c = Cursor::last(c.date.first_of_month().yesterday().ok()?);
                continue;
            }
            if self.day_matches(c.date)
                && let Some(hour) = prev_bit(self.hours, c.hour)
            {
                let from = if hour == c.hour { c.minute } else { 59 };
                if let Some(minute) = prev_bit(self.minutes, from) {
                    return Some(Cursor { hour, minute, ..c });
                }
                if hour > 0
                    && let (Some(hour), Some(minute)) =
                        (prev_bit(self.hours, hour - 1), prev_bit(self.minutes, 59))
                {
                    return Some(Cursor { hour, minute, ..c });
                }
            }
            c = Cursor::last(c.date.yesterday().ok()?);
        }
        None
    }
}

/// One cron field's values as a bit set, or the problem (without the
/// field's name).
fn parse_field(field: CronField, text: &str) -> Result<u64, String> {
    let (star_lo, star_hi) = field.star();
    let mut mask = 0u64;
    for item in text.split(',') {
        if item.is_empty() {
            return Err(format!("{text:?} has an empty list item"));
        }
        let (base, step) = match item.split_once('/') {
            Some((base, step)) => (base, Some(parse_step(step, star_hi - star_lo)?)),
            None => (item, None),
        };
        let (from, to) = if base == "*" {
            (star_lo, star_hi)
        } else if let Some((a, b)) = base.split_once('-') {
            let (a, b) = (parse_value(field, a, item)?, parse_value(field, b, item)?);
            if a > b {
                return Err(format!("range {base:?} runs backwards"));
            }
            (a, b)
        } else {
            let v = parse_value(field, base, item)?;
            if let Some(step) = step {
                return Err(format!(
                    "{item:?}: a step needs * or a range (write {v}-{star_hi}/{step})"
                ));
            }
            (v, v)
        };
        let step = step.unwrap_or(1);
        let mut v = from;
        while v <= to {
            // Day-of-week 7 is Sunday.
            let b = if field == CronField::DayOfWeek && v == 7 {
                0
            } else {
                v
            };
            mask |= 1u64 << b;
            v = v.saturating_add(step);
        }
    }
    Ok(mask)
}

fn parse_step(text: &str, max: u8) -> Result<u8, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("step {text:?} is not a number"));
    }
    match text.parse::<u8>() {
        Ok(0) => Err("step 0 must be at least 1".to_owned()),
        Ok(s) if s <= max => Ok(s),
        _ => Err(format!("step {text} is out of range 1-{max}")),
    }
}

fn parse_value(field: CronField, text: &str, item: &str) -> Result<u8, String> {
    let (lo, hi) = field.bounds();
    if text.is_empty() {
        return Err(format!("{item:?} is missing a value"));
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return match text.parse::<u8>() {
            Ok(v) if (lo..=hi).contains(&v) => Ok(v),
            _ => Err(format!("{text} is out of range {lo}-{hi}")),
        };
    }
    match field.names() {
        Some((names, first, what)) => names
            .iter()
            .position(|n| n.eq_ignore_ascii_case(text))
            .and_then(|i| u8::try_from(i).ok())
            .map(|i| i + first)
            .ok_or_else(|| format!("{text:?} is not a number or {what}")),
        None => Err(format!("{text:?} is not a number")),
    }
}

/// `90s`, `15m`, `4h` ([`crate::duration::parse`]), and a window's own
/// rules on top: more than zero, at most 7 days.
fn parse_duration(text: &str) -> Result<SignedDuration, WindowError> {
    let d = match crate::duration::parse(text) {
        Ok(d) => d,
        Err(DurationError::TooLong(_)) => return Err(WindowError::LongDuration(text.to_owned())),
        Err(_) => return Err(WindowError::Duration(text.to_owned())),
    };
    if d.is_zero() {
        return Err(WindowError::ZeroDuration(text.to_owned()));
    }
    if d < std::time::Duration::from_secs(MIN_DURATION_SECS) {
        return Err(WindowError::ShortDuration(text.to_owned()));
    }
    match SignedDuration::try_from(d) {
        Ok(d) if d <= MAX_DURATION => Ok(d),
        _ => Err(WindowError::LongDuration(text.to_owned())),
    }
}

/// A window's time zone, from the IANA database compiled into lockstep (so
/// CI and the daemon's host read it alike, whatever their tzdata), by its
/// exact IANA name: `localtime` and `posixrules` (the host's own), `Factory`
/// (no zone), and a spelling in another case are refused.
pub fn zone(name: &str) -> Result<TimeZone, WindowError> {
    let unknown = || WindowError::TimeZone(name.to_owned());
    if matches!(name, "localtime" | "posixrules" | "Factory")
        || name.starts_with("posix/")
        || name.starts_with("right/")
    {
        return Err(unknown());
    }
    let tz = jiff::tz::TimeZoneDatabase::bundled()
        .get(name)
        .map_err(|_| unknown())?;
    match tz.iana_name() {
        Some(canonical) if canonical == name => Ok(tz),
        Some(canonical) => Err(WindowError::TimeZoneSpelling(
            name.to_owned(),
            canonical.to_owned(),
        )),
        None => Err(unknown()),
    }
}

/// Every window of a plan; the error names the window (counting from 1).
pub fn parse_all(ws: &[Window]) -> Result<Vec<Schedule>, WindowError> {
    ws.iter()
        .enumerate()
        .map(|(index, w)| {
            Schedule::parse(w).map_err(|e| WindowError::At {
                index,
                error: Box::new(e),
            })
        })
        .collect()
}

/// Whether any window is open at `at`. No windows: always open.
pub fn is_open(ws: &[Schedule], at: Timestamp) -> bool {
    ws.is_empty() || ws.iter().any(|s| s.open_at(at).is_some())
}

/// `at` when open, else the earliest next start of any window (none when no
/// window starts within [`SEARCH_DAYS`]).
pub fn next_open(ws: &[Schedule], at: Timestamp) -> Option<Timestamp> {
    if is_open(ws, at) {
        return Some(at);
    }
    ws.iter().filter_map(|s| s.next_start(at)).min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(start: &str, duration: &str, tz: &str) -> Window {
        Window {
            start: start.into(),
            duration: duration.into(),
            time_zone: tz.into(),
        }
    }

    fn sched(start: &str, duration: &str, tz: &str) -> Schedule {
        Schedule::parse(&window(start, duration, tz)).unwrap()
    }

    fn err(start: &str, duration: &str, tz: &str) -> String {
        Schedule::parse(&window(start, duration, tz))
            .unwrap_err()
            .to_string()
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn bits(vs: impl IntoIterator<Item = u8>) -> u64 {
        vs.into_iter().fold(0, |m, v| m | 1 << v)
    }

    /// The next `n` starts after `from`, as UTC strings.
    fn starts(s: &Schedule, from: &str, n: usize) -> Vec<String> {
        let mut at = ts(from);
        let mut out = Vec::new();
        for _ in 0..n {
            let Some(t) = s.next_start(at) else { break };
            out.push(t.to_string());
            at = t;
        }
        out
    }

    #[test]
    fn every_field_form_parses() {
        let s = sched("*/15 9-17/4 1,15-16 JAN-mar,12 mon-FRI", "1h", "UTC");
        assert_eq!(s.minutes, bits([0, 15, 30, 45]));
        assert_eq!(s.hours, bits([9, 13, 17]));
        assert_eq!(s.doms, bits([1, 15, 16]));
        assert_eq!(s.months, bits([1, 2, 3, 12]));
        assert_eq!(s.dows, bits([1, 2, 3, 4, 5]));
        assert!(!s.dom_star && !s.dow_star);

        let s = sched("5 0 * * *", "1h", "UTC");
        assert_eq!(s.minutes, bits([5]));
        assert_eq!(s.hours, bits([0]));
        assert_eq!(s.doms, bits(1..=31));
        assert_eq!(s.months, bits(1..=12));
        assert_eq!(s.dows, bits(0..=6));
        assert!(s.dom_star && s.dow_star);

        // Sunday is 0 and 7.
        assert_eq!(sched("0 0 * * 7", "1h", "UTC").dows, bits([0]));
        assert_eq!(sched("0 0 * * 5-7", "1h", "UTC").dows, bits([0, 5, 6]));
        assert_eq!(sched("0 0 * * sun", "1h", "UTC").dows, bits([0]));
        assert_eq!(sched("0 0 * * 0-7", "1h", "UTC").dows, bits(0..=6));
        // A stepped `*` in a day field is still unrestricted (Vixie cron).
        let s = sched("0 0 */2 * */3", "1h", "UTC");
        assert_eq!(s.doms, bits((1..=31).step_by(2)));
        assert_eq!(s.dows, bits([0, 3, 6]));
        assert!(s.dom_star && s.dow_star);
        let s = sched("0 0 1-31 * 1-5/2", "1h", "UTC");
        assert!(!s.dom_star && !s.dow_star);
        assert_eq!(s.dows, bits([1, 3, 5]));
        // Leading zeros, extra blanks, the widest steps, names in any case.
        let s = sched("  00  */23 31 dec SaT ", "1h", "UTC");
        assert_eq!(s.minutes, bits([0]));
        assert_eq!(s.hours, bits([0, 23]));
        assert_eq!(s.doms, bits([31]));
        assert_eq!(s.months, bits([12]));
        assert_eq!(s.dows, bits([6]));
        assert_eq!(sched("*/59 * * * *", "1h", "UTC").minutes, bits([0, 59]));
        assert_eq!(sched("0 0 * Feb-Apr/2 *", "1h", "UTC").months, bits([2, 4]));
        // February 29 and a day-of-month named alongside a weekday are fine.
        sched("0 0 29 2 *", "1h", "UTC");
        sched("0 0 30 2 1", "1h", "UTC");
        assert_eq!(sched("0 0 * * *", "1h", "UTC").start(), "0 0 * * *");
    }

    #[test]
    fn every_cron_error_names_the_field_and_the_problem() {
        for (start, message) in [
            ("0 25 * * *", "hour 25 is out of range 0-23"),
            ("60 * * * *", "minute 60 is out of range 0-59"),
            ("0 0 0 * *", "day-of-month 0 is out of range 1-31"),
            ("0 0 32 * *", "day-of-month 32 is out of range 1-31"),
            ("0 0 * 0 *", "month 0 is out of range 1-12"),
            ("0 0 * 13 *", "month 13 is out of range 1-12"),
            ("0 0 * * 8", "day-of-week 8 is out of range 0-7"),
            (
                "99999999999 * * * *",
                "minute 99999999999 is out of range 0-59",
            ),
            (
                "0 0 * FOO *",
                "month \"FOO\" is not a number or a month name (JAN-DEC)",
            ),
            (
                "0 0 * * MONDAY",
                "day-of-week \"MONDAY\" is not a number or a day name (SUN-SAT)",
            ),
            ("x * * * *", "minute \"x\" is not a number"),
            ("0 0 L * *", "day-of-month \"L\" is not a number"),
            ("0 JAN * * *", "hour \"JAN\" is not a number"),
            ("-1 * * * *", "minute \"-1\" is missing a value"),
            ("1- * * * *", "minute \"1-\" is missing a value"),
            ("1-2-3 * * * *", "minute \"2-3\" is not a number"),
            ("1,,2 * * * *", "minute \"1,,2\" has an empty list item"),
            ("0 1, * * *", "hour \"1,\" has an empty list item"),
            ("30-10 * * * *", "minute range \"30-10\" runs backwards"),
            (
                "0 0 * * FRI-MON",
                "day-of-week range \"FRI-MON\" runs backwards",
            ),
            ("*/0 * * * *", "minute step 0 must be at least 1"),
            ("*/60 * * * *", "minute step 60 is out of range 1-59"),
            ("0 */24 * * *", "hour step 24 is out of range 1-23"),
            ("0 0 */31 * *", "day-of-month step 31 is out of range 1-30"),
            ("0 0 * */12 *", "month step 12 is out of range 1-11"),
            ("0 0 * * */7", "day-of-week step 7 is out of range 1-6"),
            ("*/x * * * *", "minute step \"x\" is not a number"),
            ("*/ * * * *", "minute step \"\" is not a number"),
            ("*/1/2 * * * *", "minute step \"1/2\" is not a number"),
            (
                "5/15 * * * *",
                "minute \"5/15\": a step needs * or a range (write 5-59/15)",
            ),
            (
                "0 0 * * 1/2",
                "day-of-week \"1/2\": a step needs * or a range (write 1-6/2)",
            ),
            (
                "0 0 30 2 *",
                "day-of-month \"30\" never occurs in month \"2\"",
            ),
            (
                "0 0 31 APR,jun,9,11 *",
                "day-of-month \"31\" never occurs in month \"APR,jun,9,11\"",
            ),
            (
                "0 0 30-31 2 */2",
                "day-of-month \"30-31\" never occurs in month \"2\"",
            ),
        ] {
            assert_eq!(
                err(start, "1h", "UTC"),
                format!("start {start:?}: {message}"),
                "{start}"
            );
        }
        for (start, found) in [("0 22 * *", 4), ("0 22 * * * *", 6), ("@daily", 1), ("", 0)] {
            assert_eq!(
                err(start, "1h", "UTC"),
                format!(
                    "start {start:?}: expected 5 fields (minute hour day-of-month month day-of-week), found {found}"
                )
            );
        }
        let e = Schedule::parse(&window("0 0 * * 9", "1h", "UTC")).unwrap_err();
        assert!(
            matches!(
                e,
                WindowError::Field {
                    field: CronField::DayOfWeek,
                    ..
                }
            ),
            "{e:?}"
        );
    }

    #[test]
    fn durations_and_time_zones_are_checked() {
        for (text, secs) in [
            ("300s", 300),
            ("5m", 300),
            ("15m", 900),
            ("4h", 14_400),
            ("168h", 604_800),
            ("10080m", 604_800),
            ("604800s", 604_800),
            ("0004h", 14_400),
        ] {
            assert_eq!(
                sched("0 0 * * *", text, "UTC").duration(),
                SignedDuration::from_secs(secs),
                "{text}"
            );
        }
        for text in [
            "4", "h", "4d", "", "1h30m", " 4h", "-1h", "4H", "4 h", "1.5h",
        ] {
            assert_eq!(
                err("0 0 * * *", text, "UTC"),
                format!("duration {text:?}: not a duration (90s, 15m, 4h)")
            );
        }
        for text in ["0s", "0m", "0h", "000h"] {
            assert_eq!(
                err("0 0 * * *", text, "UTC"),
                format!("duration {text:?}: must be longer than zero")
            );
        }
        for text in [
            "169h",
            "604801s",
            "10081m",
            "99999999999999999999999h",
            "18446744073709551615h",
        ] {
            assert_eq!(
                err("0 0 * * *", text, "UTC"),
                format!("duration {text:?}: longer than 7 days")
            );
        }
        for text in ["90s", "4m", "299s", "1s"] {
            assert!(
                err("0 0 * * *", text, "UTC").contains("must be at least 5m"),
                "{text}"
            );
        }
        // Names only the host gives a meaning (its own zone), no zone at
        // all, and the host's alternative trees.
        for tz in [
            "Europe/Berln",
            "",
            "Mars/Olympus_Mons",
            "+02:00",
            "localtime",
            "posixrules",
            "Factory",
            "posix/Europe/Berlin",
            "right/UTC",
        ] {
            assert_eq!(
                err("0 0 * * *", "1h", tz),
                format!("timeZone {tz:?}: not a known IANA time zone")
            );
        }
        assert_eq!(
            sched("0 0 * * *", "1h", "Europe/Berlin")
                .time_zone()
                .iana_name(),
            Some("Europe/Berlin")
        );
        assert_eq!(
            err("0 0 * * *", "1h", "europe/berlin"),
            "timeZone \"europe/berlin\": write it as the IANA database does, \"Europe/Berlin\""
        );
        // UTC by its IANA name.
        assert_eq!(
            sched("0 0 * * *", "1h", "UTC").time_zone().iana_name(),
            Some("UTC")
        );
    }

    #[test]
    fn parse_all_names_the_window() {
        let ok = window("0 22 * * 1-5", "4h", "Europe/Berlin");
        assert_eq!(
            parse_all(&[window("0 25 * * *", "1h", "UTC")])
                .unwrap_err()
                .to_string(),
            "window 1: start \"0 25 * * *\": hour 25 is out of range 0-23"
        );
        let e = parse_all(&[ok.clone(), window("0 3 * * *", "1h", "Europe/Berln")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "window 2: timeZone \"Europe/Berln\": not a known IANA time zone"
        );
        assert!(matches!(e, WindowError::At { index: 1, .. }), "{e:?}");
        assert_eq!(parse_all(&[ok.clone(), ok]).unwrap().len(), 2);
        assert!(parse_all(&[]).unwrap().is_empty());
    }

    #[test]
    fn weekday_evenings_in_berlin_across_a_week() {
        let s = sched("0 22 * * 1-5", "4h", "Europe/Berlin");
        let tz = TimeZone::get("Europe/Berlin").unwrap();
        // Monday 2027-06-07 00:30 CEST, then every half hour for a week.
        let monday = ts("2027-06-07T00:30:00+02:00");
        for half_hours in 0..(7 * 48) {
            let at = monday + SignedDuration::from_mins(30 * half_hours);
            let local = tz.to_datetime(at);
            let (day, hour) = (local.weekday().to_sunday_zero_offset(), local.hour());
            // Monday to Friday from 22:00, and the following small hours.
            let open =
                ((1..=5).contains(&day) && hour >= 22) || ((2..=6).contains(&day) && hour < 2);
            assert_eq!(s.open_at(at).is_some(), open, "{local}");
            assert_eq!(is_open(std::slice::from_ref(&s), at), open, "{local}");
        }
        // The edges, to the second.
        assert_eq!(s.open_at(ts("2027-06-07T21:59:59+02:00")), None);
        assert_eq!(
            s.open_at(ts("2027-06-07T22:00:00+02:00")),
            Some(ts("2027-06-07T20:00:00Z"))
        );
        assert_eq!(
            s.closes_at(ts("2027-06-07T23:00:00+02:00")),
            Some(ts("2027-06-08T00:00:00Z"))
        );
        assert_eq!(
            s.open_at(ts("2027-06-08T01:59:59+02:00")),
            Some(ts("2027-06-07T20:00:00Z"))
        );
        assert_eq!(s.open_at(ts("2027-06-08T02:00:00+02:00")), None);
        assert_eq!(s.closes_at(ts("2027-06-08T02:00:00+02:00")), None);
        // Friday's window runs into Saturday; Saturday and Sunday open none.
        assert_eq!(
            s.open_at(ts("2027-06-12T01:30:00+02:00")),
            Some(ts("2027-06-11T20:00:00Z"))
        );
        assert_eq!(
            s.next_start(ts("2027-06-11T23:00:00+02:00")),
            Some(ts("2027-06-14T20:00:00Z"))
        );
        // Strictly after: at a start, the next one is a day later.
        assert_eq!(
            s.next_start(ts("2027-06-07T20:00:00Z")),
            Some(ts("2027-06-08T20:00:00Z"))
        );
        // In winter (CET) 22:00 is 21:00 UTC.
        assert_eq!(
            s.next_start(ts("2027-01-04T12:00:00Z")),
            Some(ts("2027-01-04T21:00:00Z"))
        );
    }

    #[test]
    fn a_window_crosses_midnight_and_the_new_year() {
        let s = sched("30 23 * * *", "90m", "UTC");
        assert_eq!(s.open_at(ts("2027-12-31T23:29:59Z")), None);
        assert_eq!(
            s.open_at(ts("2027-12-31T23:30:00Z")),
            Some(ts("2027-12-31T23:30:00Z"))
        );
        assert_eq!(
            s.open_at(ts("2028-01-01T00:59:59.999Z")),
            Some(ts("2027-12-31T23:30:00Z"))
        );
        assert_eq!(
            s.closes_at(ts("2028-01-01T00:30:00Z")),
            Some(ts("2028-01-01T01:00:00Z"))
        );
        assert_eq!(s.open_at(ts("2028-01-01T01:00:00Z")), None);
        assert_eq!(
            s.next_start(ts("2028-01-01T00:30:00Z")),
            Some(ts("2028-01-01T23:30:00Z"))
        );
    }

    #[test]
    fn day_of_month_or_day_of_week() {
        // September 2027: Fridays 3, 10, 17, 24; the 13th is a Monday.
        let or = sched("0 12 13 * 5", "1h", "UTC");
        assert_eq!(
            starts(&or, "2027-09-01T00:00:00Z", 6),
            [
                "2027-09-03T12:00:00Z",
                "2027-09-10T12:00:00Z",
                "2027-09-13T12:00:00Z",
                "2027-09-17T12:00:00Z",
                "2027-09-24T12:00:00Z",
                "2027-10-01T12:00:00Z",
            ]
        );
        // A `*`-prefixed day field: both must match (odd days that are
        // Fridays).
        let and = sched("0 12 */2 * 5", "1h", "UTC");
        assert_eq!(
            starts(&and, "2027-09-01T00:00:00Z", 3),
            [
                "2027-09-03T12:00:00Z",
                "2027-09-17T12:00:00Z",
                "2027-10-01T12:00:00Z",
            ]
        );
        let fridays = sched("0 12 * * FRI", "1h", "UTC");
        assert_eq!(
            starts(&fridays, "2027-09-01T00:00:00Z", 2),
            ["2027-09-03T12:00:00Z", "2027-09-10T12:00:00Z"]
        );
        let thirteenth = sched("0 12 13 * *", "1h", "UTC");
        assert_eq!(
            starts(&thirteenth, "2027-09-01T00:00:00Z", 2),
            ["2027-09-13T12:00:00Z", "2027-10-13T12:00:00Z"]
        );
        assert_eq!(
            or.open_at(ts("2027-09-13T12:30:00Z")),
            Some(ts("2027-09-13T12:00:00Z"))
        );
        assert_eq!(and.open_at(ts("2027-09-10T12:30:00Z")), None);
    }

    #[test]
    fn new_york_spring_forward_skips_a_start_in_the_gap() {
        // 2027-03-14 02:00 EST jumps to 03:00 EDT (07:00Z).
        let s = sched("30 2 * * *", "1h", "America/New_York");
        assert_eq!(
            starts(&s, "2027-03-12T12:00:00Z", 3),
            [
                "2027-03-13T07:30:00Z",
                "2027-03-15T06:30:00Z",
                "2027-03-16T06:30:00Z",
            ]
        );
        let mut at = ts("2027-03-14T05:00:00Z");
        while at < ts("2027-03-15T05:00:00Z") {
            assert_eq!(s.open_at(at), None, "{at}");
            at += SignedDuration::from_mins(10);
        }
        let half_hourly = sched("*/30 * * * *", "30m", "America/New_York");
        assert_eq!(
            starts(&half_hourly, "2027-03-14T06:00:00Z", 3),
            [
                "2027-03-14T06:30:00Z",
                "2027-03-14T07:00:00Z",
                "2027-03-14T07:30:00Z",
            ]
        );
        // Elapsed time: 01:00 EST + 4h is 06:00 EDT on the wall.
        let four = sched("0 1 * * *", "4h", "America/New_York");
        assert_eq!(
            four.open_at(ts("2027-03-14T09:59:59Z")),
            Some(ts("2027-03-14T06:00:00Z"))
        );
        assert_eq!(
            four.closes_at(ts("2027-03-14T07:00:00Z")),
            Some(ts("2027-03-14T10:00:00Z"))
        );
        assert_eq!(four.open_at(ts("2027-03-14T10:00:00Z")), None);
    }

    #[test]
    fn new_york_fall_back_fires_once_and_lasts_real_hours() {
        // 2027-11-07 02:00 EDT falls back to 01:00 EST (06:00Z): 01:xx
        // happens twice, 05:xxZ and 06:xxZ.
        let s = sched("30 1 * * *", "15m", "America/New_York");
        assert_eq!(
            starts(&s, "2027-11-06T12:00:00Z", 2),
            ["2027-11-07T05:30:00Z", "2027-11-08T06:30:00Z"]
        );
        assert_eq!(
            s.open_at(ts("2027-11-07T05:40:00Z")),
            Some(ts("2027-11-07T05:30:00Z"))
        );
        assert_eq!(s.open_at(ts("2027-11-07T06:35:00Z")), None);
        // At 01:10 EST the wall clock reads before 01:30, yet 01:30 EDT has
        // passed: the window opened then is still open.
        let long = sched("30 1 * * *", "90m", "America/New_York");
        assert_eq!(
            long.open_at(ts("2027-11-07T06:10:00Z")),
            Some(ts("2027-11-07T05:30:00Z"))
        );
        assert_eq!(
            long.closes_at(ts("2027-11-07T06:10:00Z")),
            Some(ts("2027-11-07T07:00:00Z"))
        );
        assert_eq!(long.open_at(ts("2027-11-07T07:00:00Z")), None);
        // Exactly at the transition instant too.
        assert_eq!(
            long.open_at(ts("2027-11-07T06:00:00Z")),
            Some(ts("2027-11-07T05:30:00Z"))
        );
        // A 4h window from 01:00 EDT lasts 4 real hours: it closes at 04:00
        // EST, three hours later on the wall.
        let four = sched("0 1 * * *", "4h", "America/New_York");
        assert_eq!(
            four.open_at(ts("2027-11-07T08:59:59Z")),
            Some(ts("2027-11-07T05:00:00Z"))
        );
        let closes = four.closes_at(ts("2027-11-07T06:30:00Z")).unwrap();
        assert_eq!(closes, ts("2027-11-07T09:00:00Z"));
        assert_eq!(
            four.time_zone().to_datetime(closes),
            "2027-11-07T04:00:00".parse::<DateTime>().unwrap()
        );
        assert_eq!(four.open_at(ts("2027-11-07T09:00:00Z")), None);
        // Every civil time of the repeated hour fired in its first pass:
        // half-hourly starts skip the second.
        let half_hourly = sched("*/30 * * * *", "30m", "America/New_York");
        assert_eq!(
            starts(&half_hourly, "2027-11-07T04:45:00Z", 4),
            [
                "2027-11-07T05:00:00Z",
                "2027-11-07T05:30:00Z",
                "2027-11-07T07:00:00Z",
                "2027-11-07T07:30:00Z",
            ]
        );
        assert_eq!(half_hourly.open_at(ts("2027-11-07T06:15:00Z")), None);
    }

    /// open_at and next_start against a minute-by-minute search over
    /// instants, around DST changes.
    #[test]
    fn searches_agree_with_brute_force_around_dst() {
        // Whether `t` (a whole UTC minute) is a start: its wall time matches
        // and the wall clock did not read the same in the three hours before.
        fn is_start(s: &Schedule, t: Timestamp) -> bool {
            let local = s.tz.to_datetime(t);
            let d = local.date();
            s.month_matches(d)
                && s.day_matches(d)
                && bit(s.hours, local.hour())
                && bit(s.minutes, local.minute())
                && (1..=180).all(|m| s.tz.to_datetime(t - SignedDuration::from_mins(m)) != local)
        }
        for tz in ["America/New_York", "Australia/Lord_Howe", "Europe/Berlin"] {
            for start in ["30 1 * * *", "*/20 0-3 * * *", "0 2 * * *", "45 2 * * *"] {
                let s = sched(start, "90m", tz);
                for (from, to) in [
                    ("2027-03-13T00:00:00Z", "2027-03-15T12:00:00Z"),
                    ("2027-11-06T00:00:00Z", "2027-11-08T12:00:00Z"),
                    ("2027-03-27T00:00:00Z", "2027-03-29T00:00:00Z"),
                    ("2027-10-30T00:00:00Z", "2027-11-01T00:00:00Z"),
                    ("2027-04-02T12:00:00Z", "2027-04-04T12:00:00Z"),
                    ("2027-10-01T12:00:00Z", "2027-10-03T12:00:00Z"),
                ] {
                    let mut at = ts(from);
                    while at < ts(to) {
                        let open = (0..90)
                            .map(|m| at - SignedDuration::from_mins(m))
                            .find(|&t| is_start(&s, t));
                        assert_eq!(s.open_at(at), open, "{tz} {start} {at}");
                        let next = (1..=48 * 60)
                            .map(|m| at + SignedDuration::from_mins(m))
                            .find(|&t| is_start(&s, t));
                        assert_eq!(s.next_start(at), next, "{tz} {start} {at}");
                        at += SignedDuration::from_mins(17);
                    }
                }
            }
        }
    }

    #[test]
    fn half_hour_dst_and_quarter_hour_offsets() {
        // Lord Howe: +10:30, +11:00 in summer; the clock moves 30 minutes.
        // 2027-10-03 02:00 jumps to 02:30.
        let s = sched("15 2 * * *", "1h", "Australia/Lord_Howe");
        assert_eq!(
            starts(&s, "2027-10-01T15:00:00Z", 3),
            [
                "2027-10-01T15:45:00Z",
                "2027-10-03T15:15:00Z",
                "2027-10-04T15:15:00Z",
            ]
        );
        let after_gap = sched("45 2 * * *", "1h", "Australia/Lord_Howe");
        assert_eq!(
            after_gap.next_start(ts("2027-10-02T00:00:00Z")),
            Some(ts("2027-10-02T15:45:00Z"))
        );
        // 2027-04-04 02:00 falls back to 01:30: 01:45 happens twice.
        let fold = sched("45 1 * * *", "1h", "Australia/Lord_Howe");
        assert_eq!(
            starts(&fold, "2027-04-03T12:00:00Z", 2),
            ["2027-04-03T14:45:00Z", "2027-04-04T15:15:00Z"]
        );
        // Kathmandu: +05:45 all year.
        let s = sched("0 0 * * *", "1h", "Asia/Kathmandu");
        assert_eq!(
            s.next_start(ts("2027-01-01T00:00:00Z")),
            Some(ts("2027-01-01T18:15:00Z"))
        );
        let s = sched("30 6 * * *", "1h", "Asia/Kathmandu");
        assert_eq!(
            s.open_at(ts("2027-01-01T01:00:00Z")),
            Some(ts("2027-01-01T00:45:00Z"))
        );
        assert_eq!(
            s.closes_at(ts("2027-01-01T01:00:00Z")),
            Some(ts("2027-01-01T01:45:00Z"))
        );
        assert_eq!(s.open_at(ts("2027-01-01T01:45:00Z")), None);
    }

    #[test]
    fn the_time_zone_defaults_to_utc() {
        let w: Window =
            serde_json::from_str(r#"{"start": "0 3 * * *", "duration": "1h"}"#).unwrap();
        assert_eq!(w.time_zone, "UTC");
        let s = Schedule::parse(&w).unwrap();
        assert_eq!(
            s.next_start(ts("2027-06-07T12:00:00Z")),
            Some(ts("2027-06-08T03:00:00Z"))
        );
        assert_eq!(
            s.open_at(ts("2027-06-08T03:59:59Z")),
            Some(ts("2027-06-08T03:00:00Z"))
        );
        assert_eq!(s.open_at(ts("2027-06-08T04:00:00Z")), None);
    }

    #[test]
    fn next_open_takes_the_earliest_window() {
        let ws = parse_all(&[
            window("0 22 * * TUE", "2h", "Europe/Berlin"),
            window("0 6 * * MON", "1h", "America/New_York"),
            window("0 0 29 2 *", "1h", "UTC"),
        ])
        .unwrap();
        // Sunday noon: New York's Monday 06:00 EDT comes before Berlin's
        // Tuesday 22:00 CEST.
        let sunday = ts("2027-06-06T12:00:00Z");
        assert!(!is_open(&ws, sunday));
        assert_eq!(next_open(&ws, sunday), Some(ts("2027-06-07T10:00:00Z")));
        // Open: now.
        let during = ts("2027-06-07T10:30:00Z");
        assert!(is_open(&ws, during));
        assert_eq!(next_open(&ws, during), Some(during));
        // After it: Berlin's.
        let after = ts("2027-06-07T11:00:00Z");
        assert!(!is_open(&ws, after));
        assert_eq!(next_open(&ws, after), Some(ts("2027-06-08T20:00:00Z")));
        // February 29 is found within 400 days, not beyond.
        let leap = &ws[2..];
        assert_eq!(
            next_open(leap, ts("2027-03-01T00:00:00Z")),
            Some(ts("2028-02-29T00:00:00Z"))
        );
        assert_eq!(next_open(leap, ts("2025-03-01T00:00:00Z")), None);
        assert!(is_open(leap, ts("2028-02-29T00:59:00Z")));
    }

    #[test]
    fn no_windows_is_always_open() {
        let at = ts("2027-06-07T12:00:00Z");
        assert!(is_open(&[], at));
        assert_eq!(next_open(&[], at), Some(at));
        let closed = parse_all(&[window("0 3 * * *", "1h", "UTC")]).unwrap();
        assert!(!is_open(&closed, at));
    }

    #[test]
    fn a_year_long_search_skips_days_not_minutes() {
        let s = sched("0 0 29 2 *", "1h", "Europe/Berlin");
        let from = ts("2027-03-01T00:00:00Z");
        let begin = std::time::Instant::now();
        for _ in 0..100 {
            assert_eq!(s.next_start(from), Some(ts("2028-02-28T23:00:00Z")));
        }
        // A minute-by-minute scan converts half a million wall times per
        // call; skipping months and days visits a few hundred.
        let spent = begin.elapsed();
        assert!(spent < std::time::Duration::from_millis(500), "{spent:?}");
    }
}
