use leap::is_leap;

#[test]
fn gregorian_leap_years() {
    for (year, leap) in [(1996, true), (1900, false), (2000, true), (2023, false), (2100, false), (2400, true)] {
        assert_eq!(is_leap(year), leap, "year {year}");
    }
}
