package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestChaosBadFlagsExit2: a bad chaos spec or setting is refused
// at once, naming the flag and what is wrong, before any namespace.
func TestChaosBadFlagsExit2(t *testing.T) {
	badFlagsExit2(t, []badFlags{
		{[]string{"netns", "-chaos", "stop:2@1s"}, "-chaos: event 1 \"stop:2@1s\": stop needs a length"},
		{[]string{"netns", "-chaos", "kill:0@1s"}, "-chaos: kill:0@1s: member 0 is a sender"},
		{[]string{"netns", "-chaos", "kill:5@1s"}, "member 5: the run has members 0..2"},
		{[]string{"netns", "-chaos", "kill:1@3s"}, "not before the senders stop (-duration 2s)"},
		{[]string{"netns", "-chaos", "kill:1@1s", "-static"}, "-static"},
		{[]string{"netns", "-chaos", "kill:1@1s", "-count", "100"}, "not -count"},
		{[]string{"netns", "-link-loss", "1"}, "-link-loss 1"},
		{[]string{"netns", "-suspect-timeout", "-1s"}, "-suspect-timeout"},
	})
}

// badFlags is a command line and what its error must say.
type badFlags struct {
	args []string
	want string
}

// badFlagsExit2 runs each command line: exit status 2, the error saying
// what is wanted.
func badFlagsExit2(t *testing.T, cases []badFlags) {
	for _, tt := range cases {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			require.Equal(t, 2, run(tt.args, &out, &errOut), errOut.String())
			require.Contains(t, errOut.String(), tt.want)
		})
	}
}
