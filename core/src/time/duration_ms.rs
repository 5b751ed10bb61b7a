//! Durations in records and metrics, as JSON numbers of milliseconds.
//!
//! Every duration the crate serializes (process timings, metrics) is a plain
//! number of milliseconds with microsecond precision, e.g. `2006.401` for
//! 2 s 6.401839 ms, never serde's default `{"secs":2,"nanos":6401839}`. Field
//! names end in `_ms` so a reader knows the unit without the docs.
//!
//! The value is `micros / 1000` as an `f64`: exact for any duration below
//! 2⁵³ µs (about 285 years), and read back to the same microsecond. Use it
//! with `#[serde(with = "crate::time::duration_ms")]`, or
//! `#[serde(with = "crate::time::duration_ms::option")]` for `Option<Duration>`.

use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serializer};

/// Milliseconds, to the microsecond, as an `f64`.
pub(crate) fn to_ms(d: Duration) -> f64 {
    // u128 → f64 rounds only beyond 2⁵³ µs; a duration that long is not a timing.
    d.as_micros() as f64 / 1000.0
}

/// The duration of `ms` milliseconds, rounded to the microsecond; `None` for a
/// negative, non-finite or unrepresentable value.
pub(crate) fn from_ms(ms: f64) -> Option<Duration> {
    if !ms.is_finite() || ms < 0.0 {
        return None;
    }
    let micros = (ms * 1000.0).round();
    // Exclusive bound: `u64::MAX as f64` rounds up to 2⁶⁴.
    if micros >= u64::MAX as f64 {
        return None;
    }
    Some(Duration::from_micros(micros as u64))
}

/// Serializes a duration as milliseconds (see the [module docs](self)).
pub(crate) fn serialize<S: Serializer>(d: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64(to_ms(*d))
}

/// Reads milliseconds back into a duration; refuses negative or non-finite numbers.
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Duration, D::Error> {
    let ms = f64::deserialize(deserializer)?;
    from_ms(ms).ok_or_else(|| D::Error::custom(format!("not a duration in milliseconds: {ms}")))
}

/// Serializes a count of microseconds (a metric kept as an integer) as
/// milliseconds, like a [`Duration`].
pub(crate) fn serialize_micros<S: Serializer>(
    micros: &u64,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serialize(&Duration::from_micros(*micros), serializer)
}

/// `Option<Duration>` as milliseconds or `null`.
pub(crate) mod option {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// `Some` as milliseconds, `None` as `null`.
    pub(crate) fn serialize<S: Serializer>(
        d: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::serialize(d, serializer),
            None => serializer.serialize_none(),
        }
    }

    /// `null` (or a missing field, with `#[serde(default)]`) as `None`.
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        #[derive(Deserialize)]
        struct Ms(#[serde(with = "super")] Duration);
        Ok(Option::<Ms>::deserialize(deserializer)?.map(|Ms(d)| d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Timing {
        #[serde(with = "crate::time::duration_ms")]
        took_ms: Duration,
        #[serde(with = "crate::time::duration_ms::option", default)]
        cancel_ms: Option<Duration>,
    }

    #[test]
    fn g12_durations_serialize_as_millisecond_numbers() {
        let t = Timing {
            took_ms: Duration::new(2, 6_401_839),
            cancel_ms: Some(Duration::from_micros(420)),
        };
        let json = serde_json::to_string(&t).expect("serializable");
        assert_eq!(json, r#"{"took_ms":2006.401,"cancel_ms":0.42}"#);
        // Read back to the microsecond.
        let back: Timing = serde_json::from_str(&json).expect("readable");
        assert_eq!(back.took_ms, Duration::from_micros(2_006_401));
        assert_eq!(back.cancel_ms, Some(Duration::from_micros(420)));
        let none: Timing = serde_json::from_str(r#"{"took_ms":0}"#).expect("readable");
        assert_eq!((none.took_ms, none.cancel_ms), (Duration::ZERO, None));
        let null = serde_json::to_value(Timing {
            took_ms: Duration::ZERO,
            cancel_ms: None,
        })
        .expect("serializable");
        assert_eq!(null, serde_json::json!({"took_ms": 0.0, "cancel_ms": null}));
    }

    #[test]
    fn g12_millisecond_numbers_refuse_what_is_not_a_duration() {
        for bad in ["-1", "1e30", "\"5\"", "{\"secs\":2,\"nanos\":0}"] {
            let text = format!(r#"{{"took_ms":{bad}}}"#);
            assert!(serde_json::from_str::<Timing>(&text).is_err(), "{bad}");
        }
        assert_eq!(from_ms(f64::NAN), None);
        assert_eq!(from_ms(1.0004), Some(Duration::from_micros(1000)));
        // Every microsecond count up to a day survives the round trip.
        for micros in [0u64, 1, 999, 1_000, 1_001, 123_456_789, 86_400_000_000] {
            let d = Duration::from_micros(micros);
            assert_eq!(from_ms(to_ms(d)), Some(d), "{micros}");
        }
    }
}
