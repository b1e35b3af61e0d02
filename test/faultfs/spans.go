package faultfs

import "sort"

// span is the byte range [start, end) of a file.
type span struct {
	start, end int64
}

// spans is a set of byte ranges, kept sorted and without overlapping or
// touching ranges.
type spans []span

// add puts [start, end) into the set, merging it with the ranges it
// overlaps or touches.
func (s spans) add(start, end int64) spans {
	if start >= end {
		return s
	}
	// The first range that ends at or after start may merge with the new one.
	i := sort.Search(len(s), func(i int) bool { return s[i].end >= start })
	j := i
	for j < len(s) && s[j].start <= end {
		start = min(start, s[j].start)
		end = max(end, s[j].end)
		j++
	}
	out := append(s[:i:i], span{start, end})
	return append(out, s[j:]...)
}

// clip returns the parts of the set below limit.
func (s spans) clip(limit int64) spans {
	var out spans
	for _, r := range s {
		if r.start >= limit {
			break
		}
		out = append(out, span{r.start, min(r.end, limit)})
	}
	return out
}
