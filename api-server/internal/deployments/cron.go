// Package deployments runs deployments on Temporal: their cron schedules
// become Temporal Schedules (one per deployment, kept in step with the
// database by the Syncer), and each fire is a short workflow the
// api-server executes itself, recording one run per occurrence.
package deployments

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // time zones for images without a zoneinfo database

	"go.temporal.io/sdk/client"
)

// Cron is a parsed 5-field POSIX cron expression.
type Cron struct {
	fields [5][]client.ScheduleRange
	// either: day-of-month and day-of-week are both restricted, so a time
	// matches when either does (as cron has always done).
	either bool
}

type cronField struct {
	name     string
	min, max int
	names    []string // names[i] is value min+i
}

var cronFields = [5]cronField{
	{name: "minute", min: 0, max: 59},
	{name: "hour", min: 0, max: 23},
	{name: "day-of-month", min: 1, max: 31},
	{name: "month", min: 1, max: 12, names: []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}},
	{name: "day-of-week", min: 0, max: 7, names: []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}},
}

const (
	fieldDayOfMonth = 2
	fieldDayOfWeek  = 4
)

// ParseCron parses a 5-field cron expression: minute hour day-of-month
// month day-of-week, each a comma-separated list of *, a value, a range
// a-b, optionally with a /step; months and days of the week may be named
// (JAN, MON); day-of-week 7 is Sunday like 0. Seconds or year fields,
// L, W, #, ? and @shortcuts are refused.
func ParseCron(expr string) (*Cron, error) {
	parts := strings.Fields(expr)
	if len(parts) != 5 {
		return nil, fmt.Errorf("must have 5 fields (minute hour day-of-month month day-of-week), got %d in %q", len(parts), expr)
	}
	c := &Cron{}
	for i, p := range parts {
		ranges, err := parseCronField(p, cronFields[i])
		if err != nil {
			return nil, err
		}
		c.fields[i] = ranges
	}
	c.fields[fieldDayOfWeek] = sundayIsZero(c.fields[fieldDayOfWeek])
	c.either = !strings.HasPrefix(parts[fieldDayOfMonth], "*") && !strings.HasPrefix(parts[fieldDayOfWeek], "*")
	return c, nil
}

func parseCronField(s string, f cronField) ([]client.ScheduleRange, error) {
	var out []client.ScheduleRange
	for item := range strings.SplitSeq(s, ",") {
		r, err := parseCronItem(item, f)
		if err != nil {
			return nil, fmt.Errorf("%s field %q: %w", f.name, s, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func parseCronItem(item string, f cronField) (client.ScheduleRange, error) {
	r := client.ScheduleRange{Step: 1}
	base, step, hasStep := strings.Cut(item, "/")
	if hasStep {
		n, err := strconv.Atoi(step)
		if err != nil || n < 1 || n > f.max {
			return r, fmt.Errorf("step %q must be a number from 1 to %d", step, f.max)
		}
		r.Step = n
	}
	switch lo, hi, isRange := strings.Cut(base, "-"); {
	case base == "*":
		r.Start, r.End = f.min, f.max
		if f.name == "day-of-week" {
			r.End = 6
		}
	case isRange:
		a, err := cronValue(lo, f)
		if err != nil {
			return r, err
		}
		b, err := cronValue(hi, f)
		if err != nil {
			return r, err
		}
		if b < a {
			return r, fmt.Errorf("range %q ends before it starts", base)
		}
		r.Start, r.End = a, b
	default:
		a, err := cronValue(base, f)
		if err != nil {
			return r, err
		}
		r.Start, r.End = a, a
		if hasStep { // a/n means from a to the field's end
			r.End = f.max
		}
	}
	return r, nil
}

func cronValue(s string, f cronField) (int, error) {
	for i, n := range f.names {
		if strings.EqualFold(s, n) {
			return f.min + i, nil
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < f.min || n > f.max {
		hint := ""
		if len(f.names) > 0 {
			hint = " or a name (" + f.names[0] + "…)"
		}
		return 0, fmt.Errorf("%q is not a value from %d to %d%s (L, W, #, ? and @ shortcuts are not supported)", s, f.min, f.max, hint)
	}
	return n, nil
}

// sundayIsZero rewrites day-of-week ranges that reach 7 (Sunday) so that
// they use 0, the only Sunday Temporal knows.
func sundayIsZero(rs []client.ScheduleRange) []client.ScheduleRange {
	out := make([]client.ScheduleRange, 0, len(rs))
	for _, r := range rs {
		if r.End < 7 {
			out = append(out, r)
			continue
		}
		if (7-r.Start)%r.Step == 0 {
			out = append(out, client.ScheduleRange{Start: 0, End: 0, Step: 1})
		}
		if r.Start <= 6 {
			out = append(out, client.ScheduleRange{Start: r.Start, End: 6, Step: r.Step})
		}
	}
	return out
}

// Calendars returns the Temporal calendar specs that match exactly the
// times the expression does. Temporal matches every field of a calendar;
// cron matches either day field when both are restricted, so that case
// takes two calendars.
func (c *Cron) Calendars() []client.ScheduleCalendarSpec {
	all := func(i int) []client.ScheduleRange {
		f := cronFields[i]
		end := f.max
		if i == fieldDayOfWeek {
			end = 6
		}
		return []client.ScheduleRange{{Start: f.min, End: end, Step: 1}}
	}
	spec := func(dom, dow []client.ScheduleRange) client.ScheduleCalendarSpec {
		return client.ScheduleCalendarSpec{Second: []client.ScheduleRange{{Start: 0}}, Minute: c.fields[0], Hour: c.fields[1],
			DayOfMonth: dom, Month: c.fields[3], DayOfWeek: dow}
	}
	if !c.either {
		return []client.ScheduleCalendarSpec{spec(c.fields[fieldDayOfMonth], c.fields[fieldDayOfWeek])}
	}
	return []client.ScheduleCalendarSpec{spec(c.fields[fieldDayOfMonth], all(fieldDayOfWeek)), spec(all(fieldDayOfMonth), c.fields[fieldDayOfWeek])}
}

// Matches reports whether t (in its own location) is an occurrence of the
// expression, to the minute.
func (c *Cron) Matches(t time.Time) bool {
	in := func(rs []client.ScheduleRange, v int) bool {
		for _, r := range rs {
			if v >= r.Start && v <= r.End && (v-r.Start)%r.Step == 0 {
				return true
			}
		}
		return false
	}
	if t.Second() != 0 || !in(c.fields[0], t.Minute()) || !in(c.fields[1], t.Hour()) || !in(c.fields[3], int(t.Month())) {
		return false
	}
	dom, dow := in(c.fields[fieldDayOfMonth], t.Day()), in(c.fields[fieldDayOfWeek], int(t.Weekday()))
	if c.either {
		return dom || dow
	}
	return dom && dow
}

// LoadTimezone loads an IANA time zone by name; UTC offsets and
// abbreviations are refused, as is "Local".
func LoadTimezone(name string) (*time.Location, error) {
	if name == "" || name == "Local" {
		return nil, fmt.Errorf("must be an IANA time zone name such as UTC or America/Los_Angeles, got %q", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%q is not an IANA time zone name (such as UTC or America/Los_Angeles)", name)
	}
	return loc, nil
}
