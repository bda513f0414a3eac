// Who the page is signed in as (GET /console/whoami), read once as the page starts.
//
// With no tokens on this cairn `identities` is false and everything shows, as it always did.
// With tokens, the page hides what the signed-in role may not do; the services refuse it
// anyway (403 naming the role needed), this only spares the user the buttons. Until the answer
// is in (a few milliseconds), nothing that needs a role shows.

export const identity = { loaded: false, identities: false, name: null, role: null };

const RANK = { viewer: 1, operator: 2, admin: 3 };

export async function loadIdentity() {
  try {
    const response = await fetch("/console/whoami", { headers: { Accept: "application/json" } });
    if (response.ok) Object.assign(identity, await response.json());
  } catch {
    // cairn did not answer: the pages say so on their own calls
  }
  identity.loaded = true;
}

// May the signed-in user do what needs `role` (viewer, operator or admin)?
export function may(role) {
  if (!identity.loaded) return false;
  if (!identity.identities) return true;
  return (RANK[identity.role] || 0) >= (RANK[role] || 3);
}
