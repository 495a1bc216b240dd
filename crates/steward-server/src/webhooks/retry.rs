//! The retry schedule of webhook deliveries: how many attempts an event gets, and how long each
//! failed one waits before the next (issue #30 item 4). Set by `serve`'s
//! `--webhook-retry-attempts`, `--webhook-retry-first-delay-ms` and
//! `--webhook-retry-max-delay-ms`; the default is like Stripe's, exponential backoff over about
//! three days.

/// Attempts at one event before it goes to the dead-letter list, by default, in attempts.
/// With the default delays, 16 attempts span about three days and six hours.
pub const WEBHOOK_RETRY_ATTEMPTS_DEFAULT: u32 = 16;
/// The wait before the first retry, by default, in milliseconds: a minute, enough for a
/// receiver restarting; each further retry waits twice as long.
pub const WEBHOOK_RETRY_FIRST_DELAY_MS_DEFAULT: u64 = 60_000;
/// The longest wait between two attempts, by default, in milliseconds: twelve hours, so a
/// receiver down for a weekend still gets several tries on Monday before the letter is dead.
pub const WEBHOOK_RETRY_MAX_DELAY_MS_DEFAULT: u64 = 12 * 60 * 60 * 1_000;
/// The most attempts a schedule may give one event, in attempts: bounds the doubling and how
/// long one failing event can hold its subscription's later ones back.
pub const WEBHOOK_RETRY_ATTEMPTS_MAX: u32 = 100;
/// The longest wait a schedule may set between two attempts, in milliseconds: a week.
pub const WEBHOOK_RETRY_DELAY_MS_MAX: u64 = 7 * 24 * 60 * 60 * 1_000;

/// How many attempts an event gets and how the waits between them grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetrySchedule {
    /// Attempts (the first one included) before the event is dead-lettered; at least 1.
    pub attempts: u32,
    /// The wait after the first failure, in milliseconds; doubled after each further one.
    pub first_delay_ms: u64,
    /// The cap on any one wait, in milliseconds.
    pub max_delay_ms: u64,
}

impl Default for RetrySchedule {
    fn default() -> Self {
        Self {
            attempts: WEBHOOK_RETRY_ATTEMPTS_DEFAULT,
            first_delay_ms: WEBHOOK_RETRY_FIRST_DELAY_MS_DEFAULT,
            max_delay_ms: WEBHOOK_RETRY_MAX_DELAY_MS_DEFAULT,
        }
    }
}

/// Why a schedule was refused, naming the setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetryScheduleError {
    #[error("--webhook-retry-attempts must be 1 to {WEBHOOK_RETRY_ATTEMPTS_MAX}, not {0}")]
    Attempts(u32),
    #[error(
        "--webhook-retry-first-delay-ms and --webhook-retry-max-delay-ms must be 1 to \
         {WEBHOOK_RETRY_DELAY_MS_MAX} ms with the first no more than the cap"
    )]
    Delays,
}

impl RetrySchedule {
    /// The schedule, or why not: every limit is bounded when set.
    pub fn new(
        attempts: u32,
        first_delay_ms: u64,
        max_delay_ms: u64,
    ) -> Result<Self, RetryScheduleError> {
        if !(1..=WEBHOOK_RETRY_ATTEMPTS_MAX).contains(&attempts) {
            return Err(RetryScheduleError::Attempts(attempts));
        }
        let delay = 1..=WEBHOOK_RETRY_DELAY_MS_MAX;
        if !delay.contains(&first_delay_ms)
            || !delay.contains(&max_delay_ms)
            || first_delay_ms > max_delay_ms
        {
            return Err(RetryScheduleError::Delays);
        }
        Ok(Self {
            attempts,
            first_delay_ms,
            max_delay_ms,
        })
    }

    /// The wait after the `failures`-th failed attempt, in milliseconds.
    pub fn delay_ms(&self, failures: u32) -> i64 {
        let doublings = failures.saturating_sub(1).min(40);
        let delay = self
            .first_delay_ms
            .saturating_mul(1u64 << doublings)
            .min(self.max_delay_ms);
        delay as i64
    }

    /// From the first attempt to the last, if every one fails, in milliseconds.
    pub fn span_ms(&self) -> i64 {
        (1..self.attempts)
            .map(|failures| self.delay_ms(failures))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_backs_off_exponentially_over_about_three_days() {
        let schedule = RetrySchedule::default();
        let day_ms = 24 * 60 * 60 * 1_000;
        let span = schedule.span_ms();
        assert!(
            (3 * day_ms - day_ms / 2..=3 * day_ms + day_ms / 2).contains(&span),
            "{span} ms"
        );
        let delays: Vec<i64> = (1..schedule.attempts)
            .map(|f| schedule.delay_ms(f))
            .collect();
        assert_eq!(&delays[..3], &[60_000, 120_000, 240_000]);
        assert!(delays.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(
            *delays.last().unwrap(),
            WEBHOOK_RETRY_MAX_DELAY_MS_DEFAULT as i64
        );
    }

    #[test]
    fn retries_double_up_to_the_cap_without_overflow() {
        let schedule = RetrySchedule::new(6, 500, 60_000).unwrap();
        let delays: Vec<i64> = (1..=10).map(|f| schedule.delay_ms(f)).collect();
        assert_eq!(&delays[..4], &[500, 1_000, 2_000, 4_000]);
        assert_eq!(*delays.last().unwrap(), 60_000);
        assert_eq!(schedule.delay_ms(u32::MAX), 60_000);
        assert_eq!(schedule.span_ms(), 500 + 1_000 + 2_000 + 4_000 + 8_000);
        let huge = RetrySchedule::new(100, WEBHOOK_RETRY_DELAY_MS_MAX, WEBHOOK_RETRY_DELAY_MS_MAX)
            .unwrap();
        assert!(huge.span_ms() > 0);
    }

    #[test]
    fn a_schedule_out_of_bounds_is_refused_naming_the_setting() {
        assert_eq!(
            RetrySchedule::new(0, 1, 1),
            Err(RetryScheduleError::Attempts(0))
        );
        assert_eq!(
            RetrySchedule::new(101, 1, 1),
            Err(RetryScheduleError::Attempts(101))
        );
        assert_eq!(RetrySchedule::new(3, 0, 1), Err(RetryScheduleError::Delays));
        assert_eq!(
            RetrySchedule::new(3, 10, 5),
            Err(RetryScheduleError::Delays)
        );
        assert!(RetryScheduleError::Attempts(0)
            .to_string()
            .contains("--webhook-retry-attempts"));
    }
}
