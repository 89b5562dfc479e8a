"""Organizer and viewer pages. Views stay thin: the work is in lifecycle.py and dashboard.py.

Permissions: anyone may read public campaigns; staff read everything and are the only ones
who write (create, launch, pause, resume, stop, tokens). Anonymous writers are sent to the
login page; logged-in non-staff users get 403. Every write is a POST behind Django's CSRF
middleware.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from swarm_app.campaigns.models import Campaign
from swarm_app.campaigns.rollups import refresh_rollups
from swarm_app.coordinator import archive
from swarm_app.coordinator.models import WorkerToken
from swarm_app.coordinator.tokens import create_token, revoke
from swarm_app.core import health, join
from swarm_app.runs import lifecycle, local_workers
from swarm_app.web import dashboard, run_info, series, status_tables
from swarm_app.web.forms import CampaignForm, TokenForm, sizing_of, tasks_to_text
from worker import __version__
from worker.shared.campaign import CAMPAIGN_PRESETS
from worker.shared.questions import PRESETS as TASK_PRESETS

# The organizer's actions; which state allows which is lifecycle.ACTIONS (enforced there).
ACTIONS: dict[str, Callable[[Campaign], object]] = {
    "launch": lifecycle.launch,
    "pause": lifecycle.pause,
    "resume": lifecycle.resume,
    "stop": lifecycle.stop,
}


def staff_required(view: Callable) -> Callable:
    """Anonymous: to the login page. Logged in without staff status: 403."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not request.user.is_staff:
            raise PermissionDenied("organizer actions need a staff account")
        return view(request, *args, **kwargs)

    return wrapper


def visible_campaigns(user) -> QuerySet[Campaign]:
    campaigns = Campaign.objects.all()
    return campaigns if user.is_staff else campaigns.filter(public=True)


def get_visible(request: HttpRequest, pk: int) -> Campaign:
    """The campaign if this user may see it; 404 otherwise (private ones do not leak)."""
    return get_object_or_404(visible_campaigns(request.user), pk=pk)


def status(request: HttpRequest) -> HttpResponse:
    """The home page: campaigns, live worker counts and totals."""
    rows, totals = status_tables.status_rows(list(visible_campaigns(request.user)[:200]))
    return render(
        request,
        "core/home.html",
        {
            "version": __version__,
            "embedded": settings.EMBEDDED,
            "rows": rows,
            "totals": totals,
            "public_page": True,
        },
    )


def campaign_detail(request: HttpRequest, pk: int) -> HttpResponse:
    campaign = get_visible(request, pk)
    # The run section (started, elapsed, time left, headline gain, verdict) is rendered here from
    # the dashboard's tables, the payload static/campaigns/run.js then follows live. Computed
    # afresh (not dashboard.cached_tables): the page's first words are those of this request.
    refresh_rollups(rebuild=False)
    run = run_info.run_info(dashboard.tables(campaign))
    return render(
        request,
        "campaigns/detail.html",
        {
            "campaign": campaign,
            "public_page": campaign.public,
            "config": campaign.config,
            "run": run,
            "settings_fields": run_info.settings_fields(campaign.config),
            "is_staff": request.user.is_staff,
            "actions": list(lifecycle.ACTIONS),
            "allowed_actions": lifecycle.allowed_actions(campaign.state),
            "band": series.BAND,
            "agents": dashboard.agent_choices(campaign),
            # Beat and the default queue's workers run completion, liveness and the dashboards.
            "housekeeping_stopped": campaign.state == Campaign.State.RUNNING
            and not health.housekeeping_running(),
            # "Join this campaign" (swarm_app/volunteers/): shown on open campaigns' pages.
            "join": {
                "open": campaign.public and campaign.volunteer_access == Campaign.VolunteerAccess.OPEN,
                "command": join.volunteer_command(join.join_url(request), "<your token>"),
                "public_url_set": join.public_url_set(),
                "signup": settings.SWARM_VOLUNTEER_SIGNUP,
            },
            "page_config": {
                "id": campaign.pk,
                "dashboard": reverse("api-dashboard", args=[campaign.pk]),
                "agent": reverse("api-agent", args=[campaign.pk]),
                "run": reverse("api-run", args=[campaign.pk]),
                "socket": f"/ws/campaigns/{campaign.pk}/",
                "staff": request.user.is_staff,
                "actions_by_state": lifecycle.actions_by_state(),
                # the arms in the page's order with their labels: one definition (series.ARM_LABELS)
                "arms": [{"arm": arm.value, "label": series.ARM_LABELS[arm]} for arm in series.ARMS],
            },
        },
    )


@staff_required
def campaign_new(request: HttpRequest) -> HttpResponse:
    allow_local = local_workers.local_workers_allowed()
    if request.method == "POST":
        form = CampaignForm(request.POST, allow_local_workers=allow_local)
        if form.is_valid() and form.config is not None:
            campaign = create_campaign(request, form)
            return redirect(campaign)
    else:
        preset = request.GET.get("preset", "")
        form = CampaignForm(
            initial=CampaignForm.initial_for(
                preset if preset in CAMPAIGN_PRESETS else "", **CampaignForm.prefill(request.GET)
            ),
            allow_local_workers=allow_local,
        )
    return render(
        request,
        "campaigns/new.html",
        {
            "form": form,
            "sizing": form.sizing(),
            "presets": list(CAMPAIGN_PRESETS),
            "allow_local": allow_local,
            "task_preset_lines": {name: tasks_to_text(mix.to_json()) for name, mix in TASK_PRESETS.items()},
        },
    )


@staff_required
@require_GET
def campaign_sizing(request: HttpRequest) -> JsonResponse:
    """The form's sizing line for ``?replicates=R&seeds=S&tiers=T`` (sizing.Design.to_json),
    which static/campaigns/form.js fetches as those fields change; a count that is not a whole
    number is a 400."""
    try:
        counts = [int(request.GET.get(name, "")) for name in ("replicates", "seeds", "tiers")]
    except ValueError:
        return JsonResponse({"error": "replicates, seeds and tiers must be whole numbers"}, status=400)
    return JsonResponse(sizing_of(*counts).to_json())


def create_campaign(request: HttpRequest, form: CampaignForm) -> Campaign:
    """Store the campaign; launch it and start local workers if the form asked to."""

    data = form.cleaned_data
    with transaction.atomic():
        campaign = Campaign.objects.create(
            name=data["name"], config=form.config.to_json(), public=data["public"], created_by=request.user
        )
        if data["launch_now"]:
            lifecycle.launch(campaign)
    messages.success(request, f"Campaign {campaign.name!r} created ({campaign.state}).")
    local = data.get("local_workers") or 0
    if local:
        # One token for N local processes: a ban holds for the lying node only.
        _, secret = create_token(campaign, f"local workers ({local})", WorkerToken.BanScope.NODE)
        local_workers.start_local_workers(campaign, local, request.build_absolute_uri("/"), secret)
        messages.info(request, f"Started {local} local worker(s); their logs are in the data directory.")
    return campaign


@require_POST
@staff_required
def campaign_action(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    campaign = get_object_or_404(Campaign, pk=pk)
    try:
        ACTIONS[action](campaign)
    except lifecycle.LifecycleError as error:
        messages.error(request, str(error))
    else:
        campaign.refresh_from_db()
        messages.success(request, f"Campaign {campaign.name!r} is {campaign.state}.")
    return redirect(campaign)


@staff_required
def campaign_tokens(request: HttpRequest, pk: int) -> HttpResponse:
    """List tokens; POST creates one and shows its secret once (it is stored hashed)."""

    campaign = get_object_or_404(Campaign, pk=pk)
    secret = None
    if request.method == "POST":
        form = TokenForm(request.POST)
        if form.is_valid():
            token, secret = create_token(campaign, form.cleaned_data["label"], form.cleaned_data["ban_scope"])
            messages.success(request, f"Token {token.prefix}… created. Copy it now: it is not shown again.")
            form = TokenForm()
    else:
        form = TokenForm()
    response = render(
        request,
        "campaigns/tokens.html",
        {
            "campaign": campaign,
            "tokens": campaign.tokens.filter(control_run=None).order_by("-created_at"),
            "form": form,
            "secret": secret,
            # The address volunteers reach, from the setting; the browsing host only as a
            # fallback the page warns about (an organizer may browse a loopback or private name).
            "join_command": join.volunteer_command(join.join_url(request), secret) if secret else "",
            "public_url_set": join.public_url_set(),
            # Volunteers' own tokens: the invite link of an invite-only campaign (swarm_app/volunteers/).
            "invite_link": join.absolute(
                request, reverse("campaign-invite", args=[campaign.pk, campaign.invite_code])
            )
            if campaign.invite_code
            else "",
        },
    )
    response["Cache-Control"] = "no-store"  # the page may hold a secret
    return response


@require_POST
@staff_required
def token_revoke(request: HttpRequest, pk: int, token_id: int) -> HttpResponse:

    campaign = get_object_or_404(Campaign, pk=pk)
    token = get_object_or_404(campaign.tokens.filter(control_run=None), pk=token_id)
    revoke(token)
    messages.success(
        request,
        f"Token {token.prefix}… revoked; workers using it are disconnected now and refused from now on.",
    )
    return redirect("campaign-tokens", pk=campaign.pk)


@require_GET
@staff_required
def rollouts_download(request: HttpRequest, pk: int) -> HttpResponse:
    """Every rollout of the campaign, archived or still in the pool, as gzip-compressed JSONL
    (one rollout a line, each once), streamed (swarm_app/coordinator/archive.py)."""

    campaign = get_object_or_404(Campaign, pk=pk)
    response = StreamingHttpResponse(archive.stream(campaign.pk), content_type="application/gzip")
    response["Content-Disposition"] = f'attachment; filename="campaign-{campaign.pk}-rollouts.jsonl.gz"'
    response["Cache-Control"] = "no-store"
    return response
