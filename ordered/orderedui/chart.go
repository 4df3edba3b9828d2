package orderedui

import (
	"fmt"
	"strings"
	"time"

	"github.com/orderedq/ordered/ordered"
)

// Chart geometry, in SVG user units.
const (
	chartW    = 600
	chartH    = 120
	chartLeft = 4
	chartTop  = 14
)

// chart is a server-rendered SVG chart: bars, or a polyline, over the last ChartWindow.
type chart struct {
	W, H     int
	Bars     []bar
	Line     string
	MaxLabel string
	Empty    string
	Summary  string
}

type bar struct {
	X, Y, W, H float64
	Title      string
}

// doneChart draws the jobs done in each minute of the last hour, one bar a minute.
func doneChart(counts []ordered.MinuteCount, now time.Time) chart {
	c := chart{W: chartW, H: chartH}
	end := now.Truncate(time.Minute)
	start := end.Add(-ChartWindow + time.Minute)
	n := int(ChartWindow / time.Minute)
	per := make([]int64, n)
	var peak, total int64
	for _, m := range counts {
		i := int(m.Minute.Sub(start) / time.Minute)
		if i < 0 || i >= n {
			continue
		}
		per[i] += m.Count
		total += m.Count
	}
	for _, v := range per {
		peak = max(peak, v)
	}
	c.MaxLabel = fmt.Sprintf("%d/min", peak)
	c.Summary = fmt.Sprintf("%d done in the last hour; %d in the last minute", total, per[n-1])
	if peak == 0 {
		c.Empty = "no job done in the last hour"
		return c
	}
	w := float64(chartW-chartLeft) / float64(n)
	for i, v := range per {
		h := float64(chartH-chartTop) * float64(v) / float64(peak)
		c.Bars = append(c.Bars, bar{X: chartLeft + float64(i)*w, Y: chartH - h, W: w * 0.8, H: h,
			Title: fmt.Sprintf("%s: %d done", start.Add(time.Duration(i)*time.Minute).UTC().Format("15:04"), v)})
	}
	return c
}

// ageChart draws the oldest ready job's age as sampled over the last hour.
func ageChart(points []samplePoint, now time.Time, every time.Duration) chart {
	c := chart{W: chartW, H: chartH}
	start := now.Add(-ChartWindow)
	var peak time.Duration
	for _, p := range points {
		peak = max(peak, p.age)
	}
	c.MaxLabel = fmtDur(peak)
	if len(points) < 2 {
		c.Empty = fmt.Sprintf("sampled every %s since this dashboard started: not enough samples yet", every)
		return c
	}
	c.Summary = fmt.Sprintf("%d samples, every %s; peak %s, now %s", len(points), every, fmtDur(peak), fmtDur(points[len(points)-1].age))
	var b strings.Builder
	for _, p := range points {
		x := chartLeft + float64(chartW-chartLeft)*float64(p.at.Sub(start))/float64(ChartWindow)
		y := float64(chartH)
		if peak > 0 {
			y -= float64(chartH-chartTop) * float64(p.age) / float64(peak)
		}
		fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
	}
	c.Line = strings.TrimSpace(b.String())
	return c
}

// fmtDur writes d for a person: milliseconds under a second, then seconds, minutes, hours.
func fmtDur(d time.Duration) string {
	neg := d < 0
	if neg {
		d = -d
	}
	var s string
	switch {
	case d < time.Second:
		s = d.Round(time.Millisecond).String()
	case d < time.Minute:
		s = d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		s = d.Round(time.Second).String()
	default:
		s = d.Round(time.Minute).String()
		s = strings.TrimSuffix(s, "0s")
	}
	if neg {
		return "-" + s
	}
	return s
}
