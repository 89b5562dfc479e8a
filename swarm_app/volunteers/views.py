"""Volunteer pages: sign-up, my tokens, a volunteer's page, a node's page, a campaign's
leaderboard and its invite link. Thin: the work is in accounts.py, tokens.py, pages.py.

Visibility follows the campaign pages (web/views.get_visible): public campaigns for
everyone, private ones for staff (404 otherwise). No page here shows a username, an email or a
token other than the one just made, shown once to its owner.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from swarm_app.campaigns.models import Campaign
from swarm_app.coordinator.models import WorkerNode
from swarm_app.core import join
from swarm_app.volunteers import accounts, credit, pages, tokens
from swarm_app.volunteers.models import Volunteer
from swarm_app.web.views import get_visible, staff_required


def signup(request: HttpRequest) -> HttpResponse:
    if not accounts.signup_enabled():
        raise Http404("sign-up is switched off on this coordinator")
    if request.user.is_authenticated:
        return redirect("volunteer-me")
    if request.method == "POST":
        if not accounts.signup_allowed(request):
            return render(request, "volunteers/signup_throttled.html", status=429)
        form = accounts.SignupForm(request.POST)
        if form.is_valid():
            user = form.save()
            login(request, user, backend="django.contrib.auth.backends.ModelBackend")
            messages.success(request, "Welcome! Make a worker token below to join a campaign.")
            return redirect("volunteer-me")
    else:
        form = accounts.SignupForm()
    return render(request, "volunteers/signup.html", {"form": form})


def _invited(request: HttpRequest) -> list[int]:
    return [int(pk) for pk in request.session.get(tokens.SESSION_INVITES, [])]


@login_required
def me(request: HttpRequest) -> HttpResponse:
    """My tokens: make one (shown once, with its join line), list and revoke mine."""
    # None for an account the administrator made: it becomes a volunteer by choosing a name.
    volunteer = Volunteer.objects.filter(user=request.user).first()
    secret = line = None
    campaigns = list(tokens.joinable(_invited(request)).order_by("-created_at"))
    if request.method == "POST" and "display_name" in request.POST:
        form = accounts.DisplayNameForm(request.POST, user_id=request.user.pk)
        if form.is_valid():
            name = form.cleaned_data["display_name"]
            Volunteer.objects.update_or_create(user=request.user, defaults={"display_name": name})
            messages.success(request, f"Your display name is now {name!r}.")
            return redirect("volunteer-me")
        messages.error(request, "; ".join(form.errors.get("display_name", [])))
    elif request.method == "POST":
        form = accounts.TokenForm(request.POST)
        if not form.is_valid():
            messages.error(request, " ".join(error for errors in form.errors.values() for error in errors))
        elif volunteer is None:
            messages.error(request, "Choose a display name first.")
        else:
            campaign, name = form.cleaned_data["campaign"], form.cleaned_data["name"]
            try:
                token, secret = tokens.create(request.user, campaign, name, _invited(request))
            except tokens.TokenError as error:
                messages.error(request, str(error))
            else:
                line = join.volunteer_command(join.join_url(request), secret)
                messages.success(
                    request, f"Token {token.prefix}… created. Copy it now: it is not shown again."
                )
    response = render(
        request,
        "volunteers/me.html",
        {
            "volunteer": volunteer,
            "campaigns": campaigns,
            "tokens": tokens.owned(request.user),
            "secret": secret,
            "join_line": line,
            "public_url_set": join.public_url_set(),
            "credit": credit.volunteer_credit(request.user.pk),
        },
    )
    response["Cache-Control"] = "no-store"  # the page may hold a secret
    return response


@require_POST
@login_required
def revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    try:
        token = tokens.revoke(request.user, token_id)
    except tokens.TokenError as error:
        messages.error(request, str(error))
    else:
        messages.success(request, f"Token {token.prefix}… revoked; its workers are disconnected now.")
    return redirect("volunteer-me")


def volunteer_page(request: HttpRequest, pk: int) -> HttpResponse:
    volunteer = get_object_or_404(Volunteer.objects.select_related("user"), pk=pk)
    own = request.user.is_authenticated and request.user.pk == volunteer.user_id
    nodes = list(pages.visible_nodes(volunteer, request.user))
    rows = [pages.node_row(node) for node in nodes]
    curves = pages.reward_curves(nodes)
    return render(
        request,
        "volunteers/volunteer.html",
        {
            "volunteer": volunteer,
            "own": own,
            "rows": rows,
            "credit": sum(row["credit"] or 0 for row in rows),
            "curves": curves,
            "evaluated": any(curve["held_out"] for curve in curves),
            "exports": [
                {"id": f"export-line-{campaign_id}", "line": pages.export_line(campaign_id)}
                for campaign_id in dict.fromkeys(node.campaign_id for node in nodes)
            ],
            "public_page": True,
        },
    )


def node_page(request: HttpRequest, pk: int, node_pk: int) -> HttpResponse:
    campaign = get_visible(request, pk)
    node = get_object_or_404(
        WorkerNode.objects.select_related("campaign", "token__owner__volunteer", "helpfulness"),
        campaign=campaign,
        pk=node_pk,
    )
    row = pages.node_row(node)
    owner = row["volunteer"]
    if row["credit"] is None and not (
        request.user.is_staff or (owner is not None and owner.user_id == request.user.pk)
    ):
        raise Http404("no such node")  # a banned node is hidden from the public
    curves = pages.reward_curves([node])
    return render(
        request,
        "volunteers/node.html",
        {
            "campaign": campaign,
            "row": row,
            "own": owner is not None and owner.user_id == request.user.pk,
            "curves": curves,
            "evaluated": any(curve["held_out"] for curve in curves),
            "export_line": pages.export_line(campaign.pk),
            "public_page": campaign.public,
        },
    )


def leaderboard(request: HttpRequest, pk: int) -> HttpResponse:
    campaign = get_visible(request, pk)
    context = pages.leaderboard(campaign, request.GET.get("volunteers"), request.GET.get("nodes"))
    return render(
        request,
        "volunteers/leaderboard.html",
        {"campaign": campaign, "public_page": campaign.public, **context},
    )


def invite(request: HttpRequest, pk: int, code: str) -> HttpResponse:
    """An invite link: remembered in the session, so the volunteer may make tokens for it."""
    campaign = get_object_or_404(Campaign, pk=pk)
    if not tokens.accept_invite(campaign, code):
        raise Http404("this invite link is not (or no longer) valid")
    invited = set(_invited(request)) | {campaign.pk}
    request.session[tokens.SESSION_INVITES] = sorted(invited)
    messages.success(request, f"You are invited to {campaign.name!r}: make a token for it below.")
    if not request.user.is_authenticated:
        return redirect(f"{reverse('signup')}" if accounts.signup_enabled() else reverse("login"))
    return redirect("volunteer-me")


@require_POST
@staff_required
def volunteer_access(request: HttpRequest, pk: int) -> HttpResponse:
    """The organizer's switch (on the token page): open, or invite-only with a new invite link."""
    campaign = get_object_or_404(Campaign, pk=pk)
    access = request.POST.get("access", "")
    if access not in Campaign.VolunteerAccess.values:
        messages.error(request, "Choose open or invite-only.")
        return redirect("campaign-tokens", pk=pk)
    campaign.volunteer_access = access
    campaign.save(update_fields=["volunteer_access"])
    if access == Campaign.VolunteerAccess.INVITE:
        tokens.new_invite_code(campaign)
        messages.success(
            request, "Volunteers now need the invite link (a new one; older links stop working)."
        )
    else:
        messages.success(request, "Any signed-in volunteer may now make their own tokens for this campaign.")
    return redirect("campaign-tokens", pk=pk)
