package deployments

import (
	"strings"
	"testing"
	"time"
)

func TestParseCronRefuses(t *testing.T) {
	for expr, want := range map[string]string{
		"":                "5 fields",
		"* * * *":         "5 fields",
		"0 * * * * *":     "5 fields",
		"@daily":          "5 fields",
		"60 * * * *":      "minute field",
		"* 24 * * *":      "hour field",
		"* * 0 * *":       "day-of-month field",
		"* * 32 * *":      "day-of-month field",
		"* * * 13 *":      "month field",
		"* * * * 8":       "day-of-week field",
		"0 0 L * *":       "not supported",
		"0 0 * * 1#2":     "day-of-week field",
		"0 0 ? * *":       "day-of-month field",
		"0 0 15W * *":     "day-of-month field",
		"*/0 * * * *":     "step",
		"5-1 * * * *":     "ends before it starts",
		"* * * FOO *":     "month field",
		"1,,2 * * * *":    "minute field",
		"0 9 * * MON-FOO": "day-of-week field",
	} {
		_, err := ParseCron(expr)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseCron(%q) = %v, want an error naming %q", expr, err, want)
		}
	}
}

func at(s string) time.Time {
	t, err := time.Parse("2006-01-02 15:04 Mon", s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestCronMatches(t *testing.T) {
	for _, c := range []struct {
		expr string
		yes  []string
		no   []string
	}{
		{"* * * * *", []string{"2026-12-06 00:00 Sun", "2026-12-07 13:37 Mon"}, nil},
		{"0 9 * * 1-5", []string{"2026-12-07 09:00 Mon", "2026-12-11 09:00 Fri"}, []string{"2026-12-06 09:00 Sun", "2026-12-07 09:01 Mon", "2026-12-07 10:00 Mon"}},
		// Both day fields restricted: either matches.
		{"30 6 1,15 * MON", []string{"2026-12-01 06:30 Tue", "2026-12-15 06:30 Tue", "2026-12-07 06:30 Mon"}, []string{"2026-12-08 06:30 Tue"}},
		// A starred day-of-month with a step still restricts by both (AND).
		{"0 0 */2 * 1", []string{"2026-12-07 00:00 Mon"}, []string{"2026-12-08 00:00 Tue", "2026-12-14 00:00 Mon"}},
		// 7 is Sunday, and ranges through it.
		{"0 0 * * 7", []string{"2026-12-06 00:00 Sun"}, []string{"2026-12-07 00:00 Mon"}},
		{"0 0 * * 5-7", []string{"2026-12-04 00:00 Fri", "2026-12-05 00:00 Sat", "2026-12-06 00:00 Sun"}, []string{"2026-12-07 00:00 Mon"}},
		{"0 0 * * 1-7/3", []string{"2026-12-07 00:00 Mon", "2026-12-10 00:00 Thu", "2026-12-06 00:00 Sun"}, []string{"2026-12-08 00:00 Tue"}},
		{"*/15 9-17/4 * JAN,dec *", []string{"2026-12-06 09:45 Sun", "2026-12-06 13:00 Sun", "2026-01-01 17:30 Thu"}, []string{"2026-12-06 10:00 Sun", "2026-11-06 09:00 Fri", "2026-12-06 09:10 Sun"}},
		{"5/20 * * * *", []string{"2026-12-06 00:05 Sun", "2026-12-06 00:45 Sun"}, []string{"2026-12-06 00:00 Sun", "2026-12-06 00:15 Sun"}},
	} {
		cr, err := ParseCron(c.expr)
		if err != nil {
			t.Fatalf("ParseCron(%q): %v", c.expr, err)
		}
		for _, s := range c.yes {
			if !cr.Matches(at(s)) {
				t.Errorf("%q does not match %s", c.expr, s)
			}
		}
		for _, s := range c.no {
			if cr.Matches(at(s)) {
				t.Errorf("%q matches %s", c.expr, s)
			}
		}
	}
}

// TestCronCalendars: Temporal matches every field of a calendar, so the
// day fields' "either" takes two calendars; Sunday is only ever 0.
func TestCronCalendars(t *testing.T) {
	cr, err := ParseCron("30 6 1,15 * 5-7")
	if err != nil {
		t.Fatal(err)
	}
	cals := cr.Calendars()
	if len(cals) != 2 {
		t.Fatalf("both day fields restricted: %d calendars, want 2", len(cals))
	}
	for _, cal := range cals {
		for _, r := range cal.DayOfWeek {
			if r.End > 6 || r.Start > 6 {
				t.Errorf("a day-of-week range reaches 7: %+v", cal.DayOfWeek)
			}
		}
		if len(cal.Second) != 1 || cal.Second[0].Start != 0 || cal.Second[0].End != 0 {
			t.Errorf("seconds: %+v, want 0 only", cal.Second)
		}
	}
	if dom := cals[0].DayOfMonth; len(dom) != 2 || len(cals[0].DayOfWeek) != 1 || cals[0].DayOfWeek[0].End != 6 {
		t.Errorf("first calendar: day-of-month %+v, every day of the week wanted: %+v", dom, cals[0].DayOfWeek)
	}
	one, err := ParseCron("0 9 * * 1-5")
	if err != nil {
		t.Fatal(err)
	}
	if len(one.Calendars()) != 1 {
		t.Error("one day field restricted: want one calendar")
	}
}

func TestLoadTimezone(t *testing.T) {
	for _, ok := range []string{"UTC", "America/Los_Angeles", "Asia/Kolkata"} {
		if _, err := LoadTimezone(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "Local", "PST", "+02:00", "Mars/Olympus"} {
		if _, err := LoadTimezone(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
