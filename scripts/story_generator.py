"""A seeded generator of short children's stories: the training text of the embedded tiny model.

Every word comes from the lists in this file, so the text is ours (MIT, like the rest of the course) and
can be rebuilt offline, bit for bit, from a seed. Each story has a beginning (who, where), an event (a
problem, a wish, a meeting, a storm, a gift, a journey), some dialogue and a resolution, and the hero's
name is carried through the whole story. Stories are joined by `<|endoftext|>` so that a model trained on
them learns to finish a story with the end-of-text token.

    python scripts/story_generator.py --stories 3 --seed 1     # print three stories
"""

from __future__ import annotations

import argparse
import random

EOS = "<|endoftext|>"

# (noun phrase without article, pronoun set) for animals; people get a name and a pronoun.
ANIMALS = [
    "fox", "rabbit", "bear", "owl", "mouse", "duck", "cat", "dog", "frog", "turtle", "squirrel", "hedgehog",
    "deer", "lamb", "pig", "goat", "bird", "badger", "otter", "puppy", "kitten", "dragon", "robot", "bee",
]
ANIMAL_ADJ = ["little", "small", "young", "brave", "shy", "curious", "clever", "happy", "tiny", "kind", "sleepy",
              "busy", "gentle", "silly", "proud", "friendly"]
ANIMAL_NAMES = ["Pip", "Max", "Rosie", "Tilly", "Benny", "Coco", "Dot", "Fluff", "Hazel", "Juno", "Kiki", "Leo",
                "Milo", "Nutmeg", "Olive", "Pebble", "Poppy", "Rusty", "Sunny", "Toby", "Willow", "Ziggy",
                "Bolt", "Maple", "Honey", "Bramble", "Clover", "Biscuit"]
GIRLS = ["Lily", "Mia", "Emma", "Sara", "Anna", "Lucy", "Ella", "Zoe", "Maya", "Nora", "Ruby", "Grace", "Amy",
         "Clara", "Ivy", "Rosa", "Hana", "Lena"]
BOYS = ["Tom", "Ben", "Sam", "Jack", "Leo", "Finn", "Noah", "Omar", "Luke", "Adam", "Ravi", "Theo", "Eli",
        "Jonah", "Oscar", "Kai", "Hugo", "Dan"]
ELDERS = [("old wizard", "he"), ("old woman", "she"), ("old man", "he"), ("wise owl", "she"), ("kind farmer", "he"),
          ("baker", "she"), ("old sailor", "he"), ("queen", "she"), ("king", "he"), ("grandmother", "she"),
          ("grandfather", "he"), ("teacher", "she"), ("fisherman", "he"), ("gardener", "she")]

PLACES = [
    ("a quiet forest", "the forest"), ("a small village by the sea", "the village"),
    ("a big green meadow", "the meadow"), ("a little house on a hill", "the hill"), ("a busy town", "the town"),
    ("a sunny farm", "the farm"), ("a cozy cottage near the woods", "the cottage"), ("a tall castle", "the castle"),
    ("a snowy valley", "the valley"), ("a garden full of flowers", "the garden"), ("a sandy island", "the island"),
    ("an old lighthouse", "the lighthouse"), ("a warm cave under the mountain", "the cave"),
    ("a pond with tall reeds", "the pond"), ("a quiet street", "the street"), ("a field of yellow corn", "the field"),
]
OBJECTS = [
    ("red ball", "ball"), ("blue hat", "hat"), ("shiny key", "key"), ("old map", "map"), ("golden coin", "coin"),
    ("little boat", "boat"), ("green kite", "kite"), ("wooden box", "box"), ("silver bell", "bell"),
    ("warm scarf", "scarf"), ("yellow umbrella", "umbrella"), ("picture book", "book"), ("magic stone", "stone"),
    ("small lamp", "lamp"), ("toy train", "train"), ("basket of apples", "basket"), ("paper star", "star"),
    ("glass jar", "jar"), ("soft blanket", "blanket"), ("music box", "music box"),
]
HIDING = ["under the bed", "behind the door", "in the tall grass", "under a big rock", "near the old tree",
          "inside a hollow log", "by the river", "under the table", "on the roof", "in the garden shed",
          "behind a bush", "under a pile of leaves", "next to the well", "in a muddy puddle"]
TIMES = ["One sunny morning", "One rainy day", "Early one morning", "One cold winter night", "Late one afternoon",
         "On a windy day", "One warm summer evening", "The next day", "One spring morning", "One quiet night"]
OPENINGS = ["Once upon a time", "Long ago", "Not long ago", "Many years ago"]
FOODS = ["apple pie", "honey cake", "bread", "soup", "cookies", "berries", "carrots", "cheese", "pancakes", "jam"]
SKILLS = [("fly a kite", "flew the kite", "the kite fell down"),
          ("bake a cake", "baked a cake", "the cake was flat and burnt"),
          ("climb the big tree", "climbed to the top of the tree", "slipped and fell into the soft grass"),
          ("swim across the pond", "swam across the pond", "the water was too cold and deep"),
          ("ride a bike", "rode the bike all the way down the road", "the bike wobbled and fell over"),
          ("sing a song", "sang a beautiful song", "the song came out as a squeak"),
          ("build a tower of blocks", "built a tall tower of blocks", "the tower fell over"),
          ("catch a fish", "caught a big silver fish", "the fish swam away"),
          ("paint a picture", "painted a picture of the sea", "the paint dripped everywhere"),
          ("read a big book", "read the whole book", "the words were too hard")]
FEELINGS_BAD = ["sad", "worried", "scared", "upset", "lonely", "tired", "cross"]
FEELINGS_GOOD = ["happy", "glad", "proud", "excited", "thankful", "joyful"]
WEATHER = [("a big storm came", "the rain fell hard and the wind was loud"),
           ("snow began to fall", "soon everything was white and cold"),
           ("dark clouds filled the sky", "thunder rolled over the hills"),
           ("a strong wind began to blow", "the trees bent and the leaves flew away"),
           ("thick fog rolled in", "nobody could see the path")]
MORALS = ["Friends are always there to help.", "It is good to share with others.", "If you try again, you can do it.",
          "Being kind makes everyone happy.", "It is brave to ask for help.", "Home is the best place of all.",
          "Small friends can do big things.", "Patience is a good friend.", "Telling the truth is always best.",
          "A gift from the heart is the best gift."]

PRON = {"he": ("he", "him", "his", "He", "His"), "she": ("she", "her", "her", "She", "Her"),
        "it": ("it", "it", "its", "It", "Its")}


class Character:
    def __init__(self, rng: random.Random, avoid: set[str] = frozenset()) -> None:
        kind = rng.random()
        while True:
            if kind < 0.55:
                animal = rng.choice(ANIMALS)
                self.name = rng.choice(ANIMAL_NAMES)
                self.gender = rng.choice(["he", "she"])
                adj = rng.choice(ANIMAL_ADJ)
                art = "an" if adj[0] in "aeiou" else "a"
                self.intro = f"{art} {adj} {animal} named {self.name}"
                self.what = f"the {animal}"
            else:
                self.gender = rng.choice(["he", "she"])
                self.name = rng.choice(GIRLS if self.gender == "she" else BOYS)
                kid = rng.choice(["girl", "little girl"] if self.gender == "she" else ["boy", "little boy"])
                self.intro = f"a {kid} named {self.name}"
                self.what = "the " + kid.split()[-1]
            if self.name not in avoid:
                break
        self.he, self.him, self.his, self.He, self.His = PRON[self.gender]


def cap(s: str) -> str:
    return s[0].upper() + s[1:]


def say(rng: random.Random, who: str, words: str, verb: str = "said") -> str:
    """A line of dialogue in one of three shapes."""
    shape = rng.random()
    if words.endswith("?") and verb == "said":
        verb = "asked"
    if shape >= 0.45 and shape < 0.75:
        return f'{cap(who)} {verb}, "{words}"'
    quoted = words[:-1] + "," if words.endswith(".") else words
    if shape < 0.45:
        return f'"{quoted}" {verb} {who}.'
    return f'"{quoted}" {who} {verb}.'


def opening(rng: random.Random, hero: Character, place: tuple[str, str]) -> str:
    choice = rng.randrange(4)
    if choice == 0:
        return f"{rng.choice(OPENINGS)}, {hero.intro} lived in {place[0]}."
    if choice == 1:
        return f"{rng.choice(OPENINGS)}, there was {hero.intro}. {hero.He} lived in {place[0]}."
    if choice == 2:
        return f"In {place[0]}, there lived {hero.intro}."
    return f"{rng.choice(TIMES)}, {hero.intro} went for a walk in {place[0]}."


def trait(rng: random.Random, hero: Character) -> str:
    return rng.choice([
        f"{hero.name} loved to play outside all day.",
        f"Every day, {hero.name} went for a walk and said hello to everyone.",
        f"{hero.name} liked to help {hero.his} friends.",
        f"{hero.name} was small, but {hero.he} had a big heart.",
        f"{hero.name} liked to sing and dance in the sun.",
        f"{hero.His} favorite food was {rng.choice(FOODS)}.",
        f"{hero.name} always asked many questions.",
    ])


def story_lost(rng: random.Random) -> str:
    hero = Character(rng)
    friend = Character(rng, {hero.name})
    place = rng.choice(PLACES)
    obj, short = rng.choice(OBJECTS)
    spots = rng.sample(HIDING, 3)
    s = [opening(rng, hero, place), trait(rng, hero)]
    s.append(rng.choice([f"{hero.name} had a {obj} that {hero.he} loved very much.",
                         f"{hero.His} favorite thing in the world was a {obj}."]))
    s.append(f"{rng.choice(TIMES)}, {hero.name} could not find the {short} anywhere.")
    s.append(f"{hero.name} felt {rng.choice(FEELINGS_BAD)}.")
    s.append(say(rng, hero.name, f"Where is my {short}?"))
    s.append(f"{hero.He} looked {spots[0]}, but it was not there.")
    s.append(f"Then {hero.he} looked {spots[1]}. It was not there either.")
    s.append(f"Just then, {friend.intro} came by.")
    s.append(say(rng, friend.name, f"Why are you {rng.choice(['sad', 'upset', 'worried'])}, {hero.name}?"))
    s.append(say(rng, hero.name, f"I lost my {obj}."))
    s.append(say(rng, friend.name, rng.choice(["I will help you look.", "Let us look together.",
                                               "Do not worry. We will find it."])))
    s.append(f"{hero.name} and {friend.name} looked {spots[2]}, and there it was!")
    s.append(f"{hero.name} was so {rng.choice(FEELINGS_GOOD)}. {hero.He} hugged {friend.name}.")
    s.append(say(rng, hero.name, rng.choice([f"Thank you, {friend.name}!", "You are a good friend.",
                                             "Thank you for helping me."])))
    s.append(rng.choice([f"From that day on, {hero.name} kept the {short} in a safe place.",
                         f"After that, {hero.name} and {friend.name} played with the {short} every day.",
                         rng.choice(MORALS)]))
    return " ".join(s)


def story_friend(rng: random.Random) -> str:
    hero = Character(rng)
    other = Character(rng, {hero.name})
    place = rng.choice(PLACES)
    food = rng.choice(FOODS)
    s = [opening(rng, hero, place)]
    s.append(rng.choice([f"{hero.name} did not have any friends, and {hero.he} felt {rng.choice(['lonely', 'sad'])}.",
                         f"{hero.name} wanted a friend to play with."]))
    s.append(f"{rng.choice(TIMES)}, {hero.he} saw {other.intro} sitting alone near {place[1]}.")
    s.append(f"{other.name} looked {rng.choice(['shy', 'sad', 'scared', 'hungry'])}.")
    s.append(say(rng, hero.name, rng.choice(["Hello! What is your name?", "Hi! Do you want to play with me?",
                                             "Are you all right?"])))
    s.append(say(rng, other.name, f"My name is {other.name}. I am new here."))
    s.append(rng.choice([f"{hero.name} shared {hero.his} {food} with {other.name}.",
                         f"{hero.name} showed {other.name} the best places in {place[1]}."]))
    s.append(rng.choice(["They played games and laughed until the sun went down.",
                         "They ran, jumped and played all afternoon.",
                         "They sat together and told funny stories."]))
    s.append(say(rng, other.name, rng.choice(["Will you be my friend?", "Can we play again tomorrow?"])))
    s.append(say(rng, hero.name, rng.choice(["Yes, of course!", "I would like that very much."])))
    s.append(rng.choice([f"From that day on, {hero.name} and {other.name} were best friends.",
                         f"{hero.name} was never lonely again.", rng.choice(MORALS)]))
    return " ".join(s)


def story_skill(rng: random.Random) -> str:
    hero = Character(rng)
    helper_name, helper_gender = rng.choice(ELDERS)
    hp = PRON[helper_gender]
    place = rng.choice(PLACES)
    want, did, fail = rng.choice(SKILLS)
    s = [opening(rng, hero, place), trait(rng, hero)]
    s.append(rng.choice([f"{hero.name} wanted to {want} more than anything.",
                         f"More than anything, {hero.name} wanted to learn to {want}."]))
    s.append(f"{hero.He} tried, but {fail}.")
    s.append(f"{hero.name} felt {rng.choice(FEELINGS_BAD)}.")
    s.append(say(rng, hero.name, rng.choice(["I will never do it.", "It is too hard for me.", "I give up."])))
    s.append(f"The {helper_name} saw {hero.him} and smiled.")
    s.append(say(rng, f"the {helper_name}", rng.choice(["Do not give up. Try again, slowly.",
                                                        "Everyone falls at first. Try one more time.",
                                                        "Take a deep breath and try again."])))
    s.append(rng.choice([f"So {hero.name} tried again, and again.", f"{hero.name} practiced every day."]))
    s.append(f"At last, {hero.name} {did}!")
    s.append(say(rng, hero.name, rng.choice(["I did it!", "Look at me!", "I can do it now!"]), "shouted"))
    s.append(f"The {helper_name} clapped {hp[2]} hands, and {hero.name} felt very {rng.choice(FEELINGS_GOOD)}.")
    s.append(rng.choice(MORALS[2:3] + MORALS[7:8] + [f"{hero.name} never forgot that day."]))
    return " ".join(s)


def story_storm(rng: random.Random) -> str:
    hero = Character(rng)
    other = Character(rng, {hero.name})
    place = rng.choice(PLACES)
    came, what = rng.choice(WEATHER)
    obj, short = rng.choice(OBJECTS[9:12] + OBJECTS[13:14] + OBJECTS[18:19])
    s = [opening(rng, hero, place)]
    s.append(f"{rng.choice(TIMES)}, {hero.name} went out to play near {place[1]}.")
    s.append(f"Suddenly, {came}, and {what}.")
    s.append(f"{hero.name} ran home as fast as {hero.he} could.")
    s.append(f"On the way, {hero.he} heard a small voice. It was {other.intro}, and {other.he} was "
             f"{rng.choice(['cold', 'wet', 'scared', 'lost'])}.")
    s.append(say(rng, other.name, rng.choice(["Please help me! I cannot find my way home.",
                                              "I am so cold. Can you help me?"])))
    s.append(say(rng, hero.name, rng.choice(["Come with me. My home is warm.", "Do not be afraid. Follow me."])))
    s.append(f"{hero.name} gave {other.name} {hero.his} {obj}, and they walked home together.")
    s.append(rng.choice([f"At home, they drank warm milk and ate {rng.choice(FOODS)}.",
                         "At home, they sat by the fire and waited for the storm to pass."]))
    s.append(f"When the sky was clear again, {hero.name} took {other.name} back to {other.his} family.")
    s.append(say(rng, other.name, f"Thank you, {hero.name}. You are very kind."))
    s.append(rng.choice([MORALS[3], MORALS[0], f"{hero.name} smiled all the way home."]))
    return " ".join(s)


def story_gift(rng: random.Random) -> str:
    hero = Character(rng)
    who, gender = rng.choice(ELDERS[1:2] + ELDERS[9:11] + [("mother", "she"), ("father", "he"), ("sister", "she"),
                                                           ("brother", "he")])
    p = PRON[gender]
    place = rng.choice(PLACES)
    obj, short = rng.choice(OBJECTS)
    s = [opening(rng, hero, place)]
    s.append(f"Tomorrow was the birthday of {hero.his} {who}, and {hero.name} wanted to give {p[1]} a present.")
    s.append(f"But {hero.name} had no money to buy a gift.")
    s.append(say(rng, hero.name, "What can I give?", "wondered"))
    s.append(rng.choice([f"{hero.He} thought and thought. Then {hero.he} had an idea!",
                         f"{hero.He} sat under a tree and thought for a long time. Then {hero.he} smiled."]))
    s.append(rng.choice([f"{hero.name} picked the prettiest flowers in {place[1]}.",
                         f"{hero.name} made a {obj} out of paper and string.",
                         f"{hero.name} baked a small {rng.choice(['honey cake', 'apple pie'])} "
                         f"all by {hero.him}self."]))
    s.append(f"{hero.He} also wrote a card that said, \"I love you.\"")
    s.append(f"The next morning, {hero.name} gave the present to {hero.his} {who}.")
    s.append(f"{hero.His} {who} smiled a big smile.")
    s.append(say(rng, f"{hero.his} {who}", rng.choice(["This is the best present ever!",
                                                       "Thank you, my dear. I love it.",
                                                       "You made this for me? It is wonderful!"])))
    s.append(f"{hero.name} felt warm and {rng.choice(FEELINGS_GOOD)} inside.")
    s.append(rng.choice([MORALS[9], MORALS[3]]))
    return " ".join(s)


def story_journey(rng: random.Random) -> str:
    hero = Character(rng)
    friend = Character(rng, {hero.name})
    elder, eg = rng.choice(ELDERS)
    home, far = rng.sample(PLACES, 2)
    obj, short = rng.choice(OBJECTS[2:4] + OBJECTS[12:14])
    s = [opening(rng, hero, home)]
    s.append(f"{rng.choice(TIMES)}, {hero.name} found a {obj} {rng.choice(HIDING)}.")
    s.append(f"{hero.He} took it to the {elder}.")
    s.append(say(rng, f"the {elder}",
                 f"This {short} is very old. It comes from {far[0]}. Someone there must be missing it."))
    s.append(f"So {hero.name} packed some {rng.choice(FOODS)} and set off, and {hero.his} friend {friend.name} "
             f"went with {hero.him}.")
    obstacle = rng.randrange(3)
    if obstacle == 0:
        s.append("Soon they came to a wide river. There was no bridge.")
        s.append(say(rng, friend.name, "How will we get across?"))
        s.append(f"{hero.name} saw a big log. They pushed it into the water and floated to the other side.")
    elif obstacle == 1:
        s.append("Soon they came to a dark wood. The path was hard to see.")
        s.append(say(rng, friend.name, "I am scared of the dark."))
        s.append(f"{hero.name} held {friend.his} hand, and they followed the light of the moon.")
    else:
        s.append("Soon they came to a tall hill. It was very steep.")
        s.append(say(rng, friend.name, "My legs are so tired."))
        s.append(f"{hero.name} said they could rest, and then they climbed slowly to the top.")
    s.append(f"At last they reached {far[1]}.")
    stranger = rng.choice(["an old woman", "a little girl", "a tired king", "a kind baker", "a small boy"])
    s.append(f"There they met {stranger} who was looking for the {short}.")
    s.append(say(rng, "the stranger", rng.choice([f"My {short}! I thought it was lost forever.",
                                                  f"You found my {short}! Thank you so much."])))
    s.append(f"{hero.name} and {friend.name} walked home, tired but {rng.choice(FEELINGS_GOOD)}.")
    s.append(rng.choice([MORALS[6], MORALS[5], MORALS[0]]))
    return " ".join(s)


def story_secret(rng: random.Random) -> str:
    hero = Character(rng)
    elder, eg = rng.choice(ELDERS)
    ep = PRON[eg]
    place = rng.choice(PLACES)
    obj, short = rng.choice(OBJECTS)
    s = [opening(rng, hero, place)]
    s.append(f"Near {place[1]}, there was an old door that nobody ever opened.")
    s.append(f"{rng.choice(TIMES)}, {hero.name} saw the {elder} open the door and go inside.")
    s.append(say(rng, hero.name, "What is behind the door?", "wondered"))
    s.append(f"{hero.name} knocked softly. The {elder} opened the door and smiled.")
    s.append(say(rng, f"the {elder}", rng.choice(["Come in, little one. I will show you a secret.",
                                                  "Do not be afraid. Come and see."])))
    s.append(rng.choice([
        f"Inside, there was a room full of books, and a {obj} sat on a high shelf.",
        f"Inside, there was a tiny garden with glowing flowers, and a {obj} lay in the middle.",
        f"Inside, there were many clocks that ticked all at once, and a {obj} sat on the table.",
    ]))
    s.append(say(rng, f"the {elder}", f"This {short} can make one wish come true. What do you wish for?"))
    s.append(f"{hero.name} thought for a while.")
    s.append(say(rng, hero.name, rng.choice(["I wish that everyone in the village had enough food.",
                                             "I wish that my friends were always happy.",
                                             "I wish that the old tree by the river would grow again."])))
    s.append(f"The {elder} nodded. {ep[3]} said it was a good wish, because it was not for {hero.name} alone.")
    s.append(f"The next morning, the wish came true, and {hero.name} kept the secret in {hero.his} heart.")
    s.append(rng.choice([MORALS[3], f"{hero.name} never told anyone about the old door."]))
    return " ".join(s)


STORIES = [story_lost, story_friend, story_skill, story_storm, story_gift, story_journey, story_secret]


def generate_stories(n: int, seed: int) -> list[str]:
    """`n` stories from `seed`; the same arguments always give the same list."""
    rng = random.Random(seed)
    return [rng.choice(STORIES)(rng) for _ in range(n)]


def corpus(n: int, seed: int) -> str:
    """The stories joined (and ended) by `<|endoftext|>`."""
    return "".join(s + EOS for s in generate_stories(n, seed))


def vocabulary() -> set[str]:
    """Every word (lower-cased letters only) that a generated story can contain."""
    import re

    words: set[str] = set()
    for s in generate_stories(20000, 12345):
        words.update(re.findall(r"[a-z]+", s.lower()))
    return words


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stories", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    for story in generate_stories(args.stories, args.seed):
        print(story, end="\n\n")
