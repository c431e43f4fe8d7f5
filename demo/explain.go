package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/statusview"
)

// explain asks the status page why a client in from gets the answer it gets for name, and prints
// the answer: the client's region and how it was found, each location in or out and why, and the
// result.
func explain(from, name string) error {
	q := url.Values{"name": {name}, "type": {"A"}, "client": {from}}.Encode()
	fmt.Printf("   Why? $ curl '%sexplain.json?%s'\n", statusURL, q)
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(statusURL + "explain.json?" + q)
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	defer resp.Body.Close()
	var body struct {
		Explanations []statusview.Explanation `json:"explanations"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	for _, x := range body.Explanations {
		fmt.Printf("   client region %s: %s\n", x.Location.Region, x.Location.How)
		if x.Answer == nil {
			continue
		}
		for _, s := range x.Answer.Sets {
			for _, it := range s.Items {
				in := "out"
				if it.Eligible {
					in = "in "
				}
				fmt.Printf("   %-3s %-13s %s\n", in, it.Label, it.Why)
			}
			for _, o := range s.Outcomes {
				fmt.Printf("   answer %s with probability %g: %s\n", strings.Join(o.Addresses, " "), o.Probability, o.Why)
			}
		}
	}
	return nil
}
