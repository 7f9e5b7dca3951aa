//! Leap years of the Gregorian calendar.

/// Whether `year` is a leap year.
pub fn is_leap(year: u32) -> bool {
    year % 4 == 0
}
