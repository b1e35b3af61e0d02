package fsm

import "errors"

// MaxJobKeyLength is the longest job_key accepted.
const MaxJobKeyLength = 64

// JobKeyRule states the job_key rule, for error messages.
const JobKeyRule = "must be 1 to 64 characters, start with an ASCII letter or digit, and contain only letters, digits, '.', '_', ':' and '-'"

// ErrJobKey describes the job_key rule; ValidJobKey returns it for any violation.
var ErrJobKey = errors.New("job_key " + JobKeyRule)

// ValidJobKey checks the job_key rule of the specification.
func ValidJobKey(k string) error {
	if len(k) < 1 || len(k) > MaxJobKeyLength {
		return ErrJobKey
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if alnum || i > 0 && (c == '.' || c == '_' || c == ':' || c == '-') {
			continue
		}
		return ErrJobKey
	}
	return nil
}
