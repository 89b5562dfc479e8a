"""The leaderboard, a volunteer's page and a node's page (swarm_app/volunteers/pages.py, views.py):
who may see them, what they rank, and that no email, username or token is ever in their source
or in the metrics export."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from swarm_app.campaigns.models import Campaign, ControlRun, RoundMetrics
from swarm_app.coordinator.models import Evaluation, NodeCredit, WorkerNode
from swarm_app.volunteers import pages, tokens
from swarm_app.volunteers.models import Volunteer
from swarm_app.web.held_out import held_out
from tests.volunteers.conftest import PASSWORD
from tests.volunteers.test_accounts import make_campaign
from worker.shared.campaign import CampaignConfig


def node_of(
    token, node_id: str, groups_drawn: int = 0, groups_drawn_informative: int = 0, **counters
) -> WorkerNode:
    node = WorkerNode.objects.create(
        node_id=node_id, campaign=token.campaign, token=token, tier="tiny-1m", **counters
    )
    if groups_drawn or groups_drawn_informative:
        NodeCredit.objects.create(
            node=node, groups_drawn=groups_drawn, groups_drawn_informative=groups_drawn_informative
        )
    return node


def test_the_leaderboard_ranks_volunteers_and_nodes_by_credit(volunteer):
    campaign = make_campaign()
    bob = Volunteer.objects.create(
        user=get_user_model().objects.create_user("bob", email="bob@example.org", password=PASSWORD),
        display_name="Bob",
    )
    ada_token, ada_secret = tokens.create(volunteer.user, campaign, "ada's laptop")
    bob_token, bob_secret = tokens.create(bob.user, campaign, "bob's desktop")
    node_of(ada_token, "a" * 32, accepted_submissions=2, accepted_rollouts=16)  # 18
    node_of(ada_token, "b" * 32, accepted_submissions=1, accepted_rollouts=8, groups_drawn=3)  # 12
    node_of(
        bob_token, "c" * 32, accepted_submissions=3, accepted_rollouts=24, groups_drawn_informative=2
    )  # 29
    node_of(bob_token, "d" * 32, accepted_submissions=9, accepted_rollouts=72, state=WorkerNode.State.BANNED)
    page = Client().get(reverse("campaign-leaderboard", args=[campaign.pk])).content.decode()
    volunteers = page[page.index('id="volunteer-ranking"') : page.index("<h2>Nodes</h2>")]
    assert volunteers.index("Ada L") < volunteers.index("Bob")  # 30 against 29 (the banned node hidden)
    assert '<td data-field="credit">30</td>' in volunteers and '<td data-field="credit">29</td>' in volunteers
    nodes = page[page.index('id="node-ranking"') :]
    names = [
        pages.node_label("c" * 32, "Bob"),
        pages.node_label("a" * 32, "Ada L"),
        pages.node_label("b" * 32, "Ada L"),
    ]
    assert [nodes.index(name) for name in names] == sorted(nodes.index(name) for name in names)
    assert "dddddddd" not in page  # the banned node
    # Nothing private in the source: no username, email, token secret, prefix or label.
    for private in (
        "ada@example.org",
        "bob@example.org",
        ">ada<",
        ">bob<",
        ada_secret,
        bob_secret,
        ada_token.prefix,
        bob_token.prefix,
        "laptop",
        "desktop",
    ):
        assert private not in page, private


def test_the_leaderboard_is_paginated(volunteer):
    campaign = make_campaign()
    token, _ = tokens.create(volunteer.user, campaign, "many")
    for n in range(pages.PAGE_SIZE + 5):
        node_of(token, f"{n:08x}" + "0" * 24, accepted_submissions=n)
    client = Client()
    first = client.get(reverse("campaign-leaderboard", args=[campaign.pk])).content.decode()
    assert "page 1 of 2" in first and f"{pages.PAGE_SIZE + 4:08x}"[-8:] in first
    second = client.get(reverse("campaign-leaderboard", args=[campaign.pk]) + "?nodes=2").content.decode()
    assert "page 2 of 2" in second and f"· {0:08x}" in second


def test_a_private_campaigns_leaderboard_and_nodes_are_staff_only(volunteer):
    campaign = make_campaign(public=False)
    node = node_of(WorkerToken_for(volunteer, campaign), "e" * 32)
    assert Client().get(reverse("node-page", args=[campaign.pk, node.pk])).status_code == 404
    staff = get_user_model().objects.create_user("org", password=PASSWORD, is_staff=True)
    assert Client().get(reverse("campaign-leaderboard", args=[campaign.pk])).status_code == 404
    organizer = Client()
    organizer.force_login(staff)
    assert organizer.get(reverse("campaign-leaderboard", args=[campaign.pk])).status_code == 200


def test_a_volunteers_page_and_a_node_page(volunteer):
    campaign = make_campaign()
    private = make_campaign("private", public=False)
    token, secret = tokens.create(volunteer.user, campaign, "laptop")
    node = node_of(token, "e" * 32, accepted_submissions=2, accepted_rollouts=4, groups_drawn=1)
    for round, reward in enumerate([0.25, 0.5]):
        RoundMetrics.objects.create(
            campaign=campaign,
            arm="swarm",
            tier="tiny-1m",
            agent=f"node:{node.node_id}",
            node=node,
            round=round,
            reward=reward,
        )
    private_token = WorkerToken_for(volunteer, private)
    node_of(private_token, "f" * 32, accepted_submissions=5)
    page = Client().get(reverse("volunteer-page", args=[volunteer.pk])).content.decode()
    assert 'id="volunteer-credit">7<' in page  # 4 + 2 + 1; the private campaign's node not shown
    assert pages.node_label("e" * 32, "Ada L") in page and "ffffffff" not in page
    assert '"reward": [0.25, 0.5]' in page  # the curve's data (json_script)
    assert f"swarm-worker export --campaign {campaign.pk} --out" in page and "checkpoints/campaign-" in page
    for private_text in ("ada@example.org", ">ada<", secret, token.prefix, "laptop"):
        assert private_text not in page, private_text
    # The volunteer sees their private campaign's node on their own page.
    own = Client()
    own.force_login(volunteer.user)
    assert "ffffffff" in own.get(reverse("volunteer-page", args=[volunteer.pk])).content.decode()
    # The node page.
    node_page = Client().get(reverse("node-page", args=[campaign.pk, node.pk])).content.decode()
    assert 'id="node-credit">7<' in node_page and 'id="node-rounds">2<' in node_page
    assert secret not in node_page and token.prefix not in node_page
    # A banned node is hidden from the public, shown frozen to its volunteer.
    WorkerNode.objects.filter(pk=node.pk).update(state=WorkerNode.State.BANNED)
    assert Client().get(reverse("node-page", args=[campaign.pk, node.pk])).status_code == 404
    frozen = own.get(reverse("node-page", args=[campaign.pk, node.pk])).content.decode()
    assert "banned: frozen and hidden" in frozen


def WorkerToken_for(volunteer: Volunteer, campaign: Campaign):
    """A token of the volunteer for a campaign they were invited to."""
    return tokens.create(volunteer.user, campaign, "invited", invited=[campaign.pk])[0]


def report_round_0(campaign, node) -> RoundMetrics:
    """The node's stored report of round 0, reward 0.5, as the coordinator links it."""
    return RoundMetrics.objects.create(
        campaign=campaign,
        arm="swarm",
        tier="tiny-1m",
        agent=f"node:{node.node_id}",
        node=node,
        round=0,
        reward=0.5,
    )


@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume asynchronous iterators")
def test_the_metrics_export_names_no_volunteer_and_no_token(volunteer):
    campaign = make_campaign()
    token, secret = tokens.create(volunteer.user, campaign, "laptop")
    node = node_of(token, "e" * 32)
    report_round_0(campaign, node)
    for fmt in ("csv", "json"):
        body = Client().get(reverse("api-metrics", args=[campaign.pk]) + f"?format={fmt}")
        text = b"".join(body).decode()
        assert node.node_id in text
        for private_text in ("ada@example.org", "ada", secret, token.prefix, "laptop"):
            assert private_text not in text.replace("metadata", ""), (fmt, private_text)


@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume asynchronous iterators")
def test_one_name_per_node_in_page_picker_table_and_export(volunteer):
    import csv
    import io
    import json

    from swarm_app.campaigns.models import ControlRun
    from swarm_app.web import dashboard, status_tables

    campaign = make_campaign()
    token, _ = tokens.create(volunteer.user, campaign, "laptop")
    node = node_of(token, "3f9c21d0" + "e" * 24)
    run = ControlRun.objects.create(campaign=campaign, tier="tiny-1m", arm="isolated", seed=2)
    report_round_0(campaign, node)
    RoundMetrics.objects.create(
        campaign=campaign,
        arm="isolated",
        tier="tiny-1m",
        agent=f"control:{run.pk}",
        control_run=run,
        round=0,
        reward=0.2,
    )
    name = "Ada L · 3f9c21d0"
    page = Client().get(reverse("node-page", args=[campaign.pk, node.pk])).content.decode()
    assert f'<h1 id="node-name">{name}</h1>' in page
    labels = {choice["agent"]: choice["label"] for choice in dashboard.agent_choices(campaign)}
    assert labels[f"node:{node.node_id}"] == f"{name} (tiny-1m)"
    assert [row["name"] for row in status_tables.worker_rows(campaign)] == [name]
    url = reverse("api-metrics", args=[campaign.pk])
    rows = list(csv.DictReader(io.StringIO(b"".join(Client().get(url, {"format": "csv"})).decode())))
    assert {row["agent"]: row["name"] for row in rows} == {
        f"node:{node.node_id}": name,
        f"control:{run.pk}": labels[f"control:{run.pk}"],
    }
    body = json.loads(b"".join(Client().get(url, {"format": "json"})).decode())
    assert {row["agent"]: row["name"] for row in body["rows"]}[f"node:{node.node_id}"] == name


def test_the_volunteers_pages_have_no_inline_scripts(volunteer):
    """The Content-Security-Policy allows no inline script: every <script> is a file or JSON."""
    campaign = make_campaign()
    token, _ = tokens.create(volunteer.user, campaign, "laptop")
    node = node_of(token, "e" * 32)
    own = Client()
    own.force_login(volunteer.user)
    urls = [
        reverse("signup"),
        reverse("volunteer-page", args=[volunteer.pk]),
        reverse("node-page", args=[campaign.pk, node.pk]),
        reverse("campaign-leaderboard", args=[campaign.pk]),
    ]
    pages_seen = [Client().get(url).content.decode() for url in urls]
    pages_seen.append(own.get(reverse("volunteer-me")).content.decode())
    pages_seen.append(
        own.post(reverse("volunteer-me"), {"campaign": campaign.pk, "name": "x"}).content.decode()
    )
    assert 'id="curves-data"' in pages_seen[1]  # the chart's data travels as JSON
    for url, page in zip([*urls, "me", "me (new token)"], pages_seen, strict=True):
        for tag in page.split("<script")[1:]:
            head = tag.split(">", 1)[0]
            assert "src=" in head or 'type="application/json"' in head, f"{url}: <script{head}>"


def evaluation(node: WorkerNode, round: int, accuracy: float | None) -> Evaluation:
    """A held-out evaluation of ``node`` after ``round``: scored, or issued and never answered."""
    return Evaluation.objects.create(
        campaign=node.campaign,
        node=node,
        round=round,
        eval_id=f"{node.pk:04d}{round:04d}".ljust(32, "0"),
        questions=[],
        n=6 if accuracy is not None else 0,
        submission_id="s" if accuracy is not None else "",
        accuracy=accuracy,
        reward=accuracy,
    )


def curves_data(page: str) -> list[dict]:
    return json.loads(page.split('id="curves-data" type="application/json">', 1)[1].split("</script>", 1)[0])


def test_the_node_and_volunteer_pages_show_held_out_accuracy_beside_the_arms(volunteer):
    """The node's held-out curve beside its tier's arms with the dashboard's unit rules: two nodes
    of one swarm count once, a control by its seed; an evaluation the node skipped is missing
    (None, and said so), never a zero; the campaign's name stays text."""
    config = CampaignConfig(
        group_size=4, questions_per_round=2, num_local=2, num_external=2, rounds=6, eval_every=2, replicates=2
    )
    campaign = Campaign.objects.create(
        name="<b>evals</b>", state=Campaign.State.RUNNING, config=config.validate().to_json()
    )
    token, _ = tokens.create(volunteer.user, campaign, "laptop")
    mine = node_of(token, "a" * 32, round=6, replicate=0)  # past every evaluation but the last
    mate = node_of(token, "b" * 32, round=4, replicate=0)  # the same swarm
    other = node_of(token, "c" * 32, round=4, replicate=1)  # the other swarm
    run = ControlRun.objects.create(campaign=campaign, tier="tiny-1m", arm="isolated", seed=0)
    control = WorkerNode.objects.create(
        node_id="d" * 32,
        campaign=campaign,
        token=token,
        tier="tiny-1m",
        arm="isolated",
        control_run=run,
        round=6,
    )
    evaluation(mine, 1, 0.5)
    evaluation(mine, 3, None)  # issued, never answered, and the node went on: missing
    evaluation(mate, 1, 0.25)
    evaluation(other, 1, 1.0)
    evaluation(control, 1, 0.125)
    evaluation(control, 3, 0.375)
    evaluation(other, 3, 0.75)
    page = Client().get(reverse("node-page", args=[campaign.pk, mine.pk])).content.decode()
    held = curves_data(page)[0]["held_out"]
    # after round 5 (the last) it may still answer: pending, not missing
    assert held["rounds"] == [1, 3, 5] and held["accuracy"] == [0.5, None, None] and held["missing"] == [3]
    arms = {arm["arm"]: arm for arm in held["arms"]}
    swarm = arms["swarm"]
    assert swarm["round"] == [1, 3]
    assert swarm["accuracy"][0] == pytest.approx(((0.5 + 0.25) / 2 + 1.0) / 2)  # one swarm counts once
    assert swarm["label"] == "swarm mean (2 swarms)" and swarm["low"][0] is not None
    assert arms["isolated"]["accuracy"] == [0.125, 0.375] and arms["isolated"]["low"] == [None, None]
    assert "Missed evaluations (no score: missing, not zero): after round 3." in page
    assert 'data-held-out="0"' in page and "<b>evals</b>" not in page and "&lt;b&gt;evals" in page
    # the campaign page's count, by node: after round 3 one node missed (mine); the mate may still
    # answer; other, scored, went on
    WorkerNode.objects.filter(pk=other.pk).update(round=6)
    assert held_out(campaign)["tiny-1m"]["swarm"]["missing"] == [0, 1]
    # the volunteer's page: the same curve for each of their nodes; the mate's last evaluation
    # (after round 3, the node at round 4) may still come: pending, not missing
    volunteer_page = Client().get(reverse("volunteer-page", args=[volunteer.pk])).content.decode()
    by_node = {curve["name"]: curve["held_out"] for curve in curves_data(volunteer_page)}
    mate_curve = by_node[pages.node_label(mate.node_id, "Ada L")]
    assert mate_curve["accuracy"] == [0.25, None] and mate_curve["missing"] == []
    # once the campaign is over, a node that stopped right after an evaluation's round missed it
    Campaign.objects.filter(pk=campaign.pk).update(state=Campaign.State.COMPLETED)
    volunteer_page = Client().get(reverse("volunteer-page", args=[volunteer.pk])).content.decode()
    by_node = {curve["name"]: curve["held_out"] for curve in curves_data(volunteer_page)}
    assert by_node[pages.node_label(mate.node_id, "Ada L")]["missing"] == [3]


def test_no_held_out_section_where_the_campaign_does_not_evaluate(volunteer):
    config = CampaignConfig(
        group_size=4, questions_per_round=2, num_local=2, num_external=2, rounds=4, eval_every=0
    )
    campaign = Campaign.objects.create(
        name="none", state=Campaign.State.RUNNING, config=config.validate().to_json()
    )
    node = node_of(tokens.create(volunteer.user, campaign, "laptop")[0], "e" * 32, round=4)
    page = Client().get(reverse("node-page", args=[campaign.pk, node.pk])).content.decode()
    assert curves_data(page)[0]["held_out"] is None and "Held-out accuracy" not in page
