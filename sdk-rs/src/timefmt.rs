//! Conversions between protobuf time values and the text forms the view types carry.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// First second of year 10000: RFC 3339 has only four year digits.
const MAX_RFC3339_SECONDS: i64 = 253_402_300_800;
/// First second of year 1, the earliest a protobuf `Timestamp` holds.
const MIN_RFC3339_SECONDS: i64 = -62_135_596_800;

/// RFC 3339 with milliseconds (`2026-11-29T09:30:00.123Z`), or `None` when
/// unset or outside what RFC 3339 can express (humantime panics there).
/// Milliseconds since the epoch, as upstream's `*_ms` fields hold them.
pub(crate) fn ms_to_proto_timestamp(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: i32::try_from(ms.rem_euclid(1000) * 1_000_000).unwrap_or(0),
    }
}

pub(crate) fn timestamp(ts: Option<prost_types::Timestamp>) -> Option<String> {
    let ts = ts?;
    if !(MIN_RFC3339_SECONDS..MAX_RFC3339_SECONDS).contains(&ts.seconds)
        || !(0..1_000_000_000).contains(&ts.nanos)
    {
        return None;
    }
    let nanos = u32::try_from(ts.nanos).ok()?;
    match u64::try_from(ts.seconds) {
        Ok(seconds) => {
            let time = UNIX_EPOCH.checked_add(Duration::new(seconds, nanos))?;
            Some(humantime::format_rfc3339_millis(time).to_string())
        }
        // humantime knows no year before 1970; prost's own text does, but leaves out a
        // fraction that is zero, which every other time here shows as `.000`.
        Err(_) => {
            let millis = prost_types::Timestamp {
                seconds: ts.seconds,
                nanos: ts.nanos - ts.nanos % 1_000_000,
            };
            let text = millis.to_string();
            Some(match text.strip_suffix('Z') {
                Some(whole) if !whole.contains('.') => format!("{whole}.000Z"),
                _ => text,
            })
        }
    }
}

/// Human duration text such as `1s 500ms`, or `None` when unset or negative.
pub(crate) fn duration(d: Option<prost_types::Duration>) -> Option<String> {
    let d = d?;
    let d = Duration::try_from(d).ok()?;
    Some(humantime::format_duration(d).to_string())
}

pub(crate) fn to_proto_timestamp(time: SystemTime) -> prost_types::Timestamp {
    prost_types::Timestamp::from(time)
}

/// Saturates instead of failing: every duration the SDK sends is a bounded wait.
pub(crate) fn to_proto_duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration::try_from(d).unwrap_or(prost_types::Duration {
        seconds: i64::MAX,
        nanos: 999_999_999,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn formats_rfc3339_millis() {
        let ts = prost_types::Timestamp {
            seconds: 1_796_117_400,
            nanos: 123_456_789,
        };
        assert_eq!(
            timestamp(Some(ts)).as_deref(),
            Some("2026-12-01T09:30:00.123Z")
        );
    }

    #[test]
    fn unset_and_out_of_range_are_none_and_times_before_1970_are_shown() {
        assert_eq!(timestamp(None), None);
        let before_epoch = prost_types::Timestamp {
            seconds: -1,
            nanos: 0,
        };
        assert_eq!(
            timestamp(Some(before_epoch)).as_deref(),
            Some("1969-12-31T23:59:59.000Z")
        );
        let first = prost_types::Timestamp {
            seconds: MIN_RFC3339_SECONDS,
            nanos: 5_000_000,
        };
        assert_eq!(
            timestamp(Some(first)).as_deref(),
            Some("0001-01-01T00:00:00.005Z")
        );
        let before_year_one = prost_types::Timestamp {
            seconds: MIN_RFC3339_SECONDS - 1,
            nanos: 0,
        };
        assert_eq!(timestamp(Some(before_year_one)), None);
        let far_future = prost_types::Timestamp {
            seconds: MAX_RFC3339_SECONDS,
            nanos: 0,
        };
        assert_eq!(timestamp(Some(far_future)), None);
    }

    #[test]
    fn formats_durations() {
        let d = prost_types::Duration {
            seconds: 1,
            nanos: 500_000_000,
        };
        assert_eq!(duration(Some(d)).as_deref(), Some("1s 500ms"));
        assert_eq!(duration(None), None);
    }

    #[test]
    fn round_trips_system_time() {
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let ts = to_proto_timestamp(t);
        assert_eq!(ts.seconds, 1_700_000_000);
        assert_eq!(to_proto_duration(Duration::from_secs(90)).seconds, 90);
    }
}
