"""Script execution: the function registry (versions as events), the content-addressed code
store, and the runner that executes code in a bubblewrap sandbox."""
